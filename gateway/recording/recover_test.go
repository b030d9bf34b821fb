package recording

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// largePart leaves in dir the spool file of a recording in progress as a
// worker killed mid-session would: complete lines of output (about body
// bytes), then a line cut short followed by a tail of tail bytes without a
// newline (zeros, as a file extended but never written). It returns the
// length and SHA-256 of the complete lines.
func largePart(t *testing.T, dir, id string, body, tail int64) (int64, string) {
	t.Helper()
	s, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Create(id)
	if err != nil {
		t.Fatal(err)
	}
	w := newWriter(f, meta(), fixedNow, DefaultMaxBytes)
	chunk := strings.Repeat("0123456789abcdef", 4<<10) // 64 KiB
	for w.n < body {
		if err := w.Stdout([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	// The spool's gathered block reaches the file, then a line is cut short.
	if err := f.flushNow(); err != nil {
		t.Fatal(err)
	}
	kept, err := os.ReadFile(f.f.Name())
	if err != nil || int64(len(kept)) < w.n {
		t.Fatalf("the spool file holds %d bytes of %d written: %v", len(kept), w.n, err)
	}
	if _, err := f.f.Seek(0, io.SeekEnd); err != nil { // the File writes at offsets
		t.Fatal(err)
	}
	if _, err := io.WriteString(f.f, `[0.1, "o", "cut mid-li`); err != nil {
		t.Fatal(err)
	}
	end, err := f.f.Seek(0, io.SeekEnd)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.f.Truncate(end + tail); err != nil {
		t.Fatal(err)
	}
	if err := f.f.Close(); err != nil { // no Commit: the process dies here
		t.Fatal(err)
	}
	return w.n, sha(kept[:w.n])
}

// TestSpoolRecoveryDoesNotHoldTheRecording recovers a 64 MiB partial
// recording (16 MiB of lines, a cut line and 48 MiB without a newline) and
// checks that recovery allocated a small fraction of that: it streams the
// file instead of reading it whole. The recovered recording is the complete
// lines and the recovery marker, with the SHA-256 of exactly those bytes.
func TestSpoolRecoveryDoesNotHoldTheRecording(t *testing.T) {
	const body, tail = 16 << 20, 48 << 20
	dir := t.TempDir()
	kept, keptSum := largePart(t, dir, "big", body, tail)
	if fi, err := os.Stat(filepath.Join(dir, "big.cast.part")); err != nil || fi.Size() < body+tail {
		t.Fatalf("partial recording: %v, %v", fi, err)
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s, err := OpenSpool(dir)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	// Recovery needs two 64 KiB buffers; reading the file whole would
	// allocate its 64 MiB.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("recovering a %d MiB recording allocated %d KiB; it must stream, not read the file whole",
			(body+tail)>>20, alloc>>10)
	} else {
		t.Logf("recovering a %d MiB recording allocated %d KiB", (body+tail)>>20, alloc>>10)
	}

	items, err := s.Pending()
	if err != nil || len(items) != 1 {
		t.Fatalf("Pending = %+v, %v", items, err)
	}
	rc, err := s.Open("big")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b := mustRead(t, rc)
	if sha(b) != items[0].SHA256 || int64(len(b)) != items[0].Size {
		t.Errorf("spooled %+v does not describe the %d-byte file", items[0], len(b))
	}
	if int64(len(b)) != kept+int64(len(recoveredMarker)) || sha(b[:kept]) != keptSum || !bytes.Equal(b[kept:], recoveredMarker) {
		t.Errorf("recovered %d bytes; want the %d bytes of complete lines, unchanged, and the recovery marker", len(b), kept)
	}
}

func mustRead(t *testing.T, r io.Reader) []byte {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readSpy is a partFile that records how recovery reads it.
type readSpy struct {
	*os.File
	largest, total int64
}

func (r *readSpy) ReadAt(p []byte, off int64) (int, error) {
	r.largest = max(r.largest, int64(len(p)))
	n, err := r.File.ReadAt(p, off)
	r.total += int64(n)
	return n, err
}

// TestRecoverFileReadsInBlocks: every read recovery makes is one block,
// and it reads the file at most twice (backwards to the last newline, then
// forwards for the checksum).
func TestRecoverFileReadsInBlocks(t *testing.T) {
	const body, tail = 4 << 20, 4 << 20
	dir := t.TempDir()
	largePart(t, dir, "spied", body, tail)
	f, err := os.OpenFile(filepath.Join(dir, "spied.cast.part"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	spy := &readSpy{File: f}
	sum, err := recoverFile(spy)
	if err != nil {
		t.Fatal(err)
	}
	if spy.largest > recoverBlock {
		t.Errorf("a read of %d bytes; recovery must read at most %d at a time", spy.largest, recoverBlock)
	}
	if spy.total > 2*fi.Size() {
		t.Errorf("read %d bytes of a %d-byte file", spy.total, fi.Size())
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(b, recoveredMarker) || sha(b) != sum {
		t.Errorf("recovered file does not end with the marker or its sum %s is not the file's", sum)
	}
}
