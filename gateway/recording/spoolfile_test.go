package recording

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// abandon leaves the File as a worker killed at this moment would: what
// it wrote is in the file, and nothing is committed.
func (f *File) abandon() {
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = f.close()
}

// flushNow returns the File's error: every Write is in the file when it
// returns, so tests that read the file of a recording in progress need
// nothing more.
func (f *File) flushNow() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// TestSpoolFileWritesInOrder: writes of every size, across block
// boundaries, arrive in the committed file in order, whole, with the
// checksum of exactly those bytes.
func TestSpoolFileWritesInOrder(t *testing.T) {
	s, err := OpenSpool(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Create("order")
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	const block = 128 << 10
	sizes := []int{1, 7, block - 8, 1, block, 3 * block / 2, 0, 5, 2*block + 1, 1<<20 + 3}
	for i, n := range sizes {
		p := bytes.Repeat([]byte{byte('a' + i)}, n)
		if k, err := f.Write(p); k != n || err != nil {
			t.Fatalf("write %d: %d, %v", i, k, err)
		}
		want.Write(p)
	}
	item, err := f.Commit()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(s.dir, "order.cast"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("the file holds %d bytes, not the %d written in order", len(got), want.Len())
	}
	if item.Size != int64(want.Len()) || item.SHA256 != sha(want.Bytes()) {
		t.Errorf("committed %+v, want %d bytes with sum %s", item, want.Len(), sha(want.Bytes()))
	}
	if _, err := f.Write([]byte("late")); !errors.Is(err, errFileClosed) {
		t.Errorf("write after Commit: %v", err)
	}
}

// TestSpoolFileWritesAQuietBlock: output of a session that goes quiet
// reaches the file without waiting for the block to fill or the session to
// end (spoolQuiet), so a crash then does not lose it.
func TestSpoolFileWritesAQuietBlock(t *testing.T) {
	s, err := OpenSpool(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Create("quiet")
	if err != nil {
		t.Fatal(err)
	}
	defer f.abandon()
	w := NewWriter(f, meta())
	if err := w.Stdout([]byte("$ ")); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(s.dir, "quiet.cast.part")
	var b []byte
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, err = os.ReadFile(name); err != nil {
			t.Fatal(err)
		}
		if int64(len(bytes.TrimRight(b, "\x00"))) == w.n {
			break
		}
	}
	if out, _ := castOf(t, bytes.TrimRight(b, "\x00")); out != "$ " {
		t.Fatalf("the file holds %q after the session went quiet; want the header and the prompt", b)
	}
}

// TestSpoolCrashLosesNothingWritten kills a recording mid-session
// (abandon): recovery keeps every line written, unchanged.
func TestSpoolCrashLosesNothingWritten(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Create("crash")
	if err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer // what the Writer handed the spool
	w := newWriter(teeWriter{f, &all}, meta(), fixedNow, DefaultMaxBytes)
	for i := 0; w.n < 3<<20+12345; i++ {
		if err := w.Stdout(fmt.Appendf(nil, "line %d %s\n", i, strings.Repeat("x", i%300))); err != nil {
			t.Fatal(err)
		}
	}
	f.abandon()

	s2, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := s2.Open("crash")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b := mustRead(t, rc)
	kept, ok := bytes.CutSuffix(b, recoveredMarker)
	if !ok || !bytes.HasPrefix(all.Bytes(), kept) {
		t.Fatalf("recovered %d bytes; want a prefix of the %d written, then the recovery marker", len(b), all.Len())
	}
	if lost := all.Len() - len(kept); lost > 0 {
		t.Errorf("the crash lost %d of the %d bytes written to the recording", lost, all.Len())
	}
	if err := readAll(bytes.NewReader(b)); err != nil {
		t.Errorf("recovered recording does not parse: %v", err)
	}
}

// teeWriter writes to w and then, if that succeeded, to copy.
type teeWriter struct {
	w    interface{ Write([]byte) (int, error) }
	copy *bytes.Buffer
}

func (t teeWriter) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	t.copy.Write(p[:n])
	return n, err
}

// TestSpoolFullDiskRefusesTheEvent fills a recording up to the process's
// file size limit (RLIMIT_FSIZE: the kernel's EFBIG, as a full disk gives
// ENOSPC): the event that finds no room is refused before it is accepted,
// so it would not be relayed, and the recording commits with exactly the
// output accepted before it. It is refused only when it does not fit.
func TestSpoolFullDiskRefusesTheEvent(t *testing.T) {
	const limit = 3 << 20
	s, err := OpenSpool(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Create("full")
	if err != nil {
		t.Fatal(err)
	}
	limitFileSize(t, limit)
	w := NewWriter(f, meta())
	var accepted []byte
	var werr error
	for i := 0; werr == nil && i < 1000; i++ {
		chunk := bytes.Repeat([]byte{byte('a' + i%26)}, 50_000)
		if werr = w.Stdout(chunk); werr == nil {
			accepted = append(accepted, chunk...)
		}
	}
	if !errors.Is(werr, syscall.EFBIG) {
		t.Fatalf("writing past the file size limit: %v, want EFBIG", werr)
	}
	item, err := f.Commit()
	if err != nil {
		t.Fatalf("commit after a refused event: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(s.dir, "full.cast"))
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := castOf(t, b); out != string(accepted) || item.SHA256 != sha(b) {
		t.Fatalf("recorded %d bytes of output, %d were accepted", len(out), len(accepted))
	}
	if len(b)+50_000 <= limit {
		t.Errorf("an event of 50000 bytes was refused with %d bytes of the %d-byte limit free", limit-len(b), limit)
	}
	t.Logf("accepted %d bytes of output in a %d-byte recording, limit %d", len(accepted), len(b), limit)
}

// limitFileSize sets RLIMIT_FSIZE for this process until the test ends,
// with SIGXFSZ ignored so that passing it fails with EFBIG instead of
// killing the test.
func limitFileSize(t *testing.T, n uint64) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatalf("getrlimit: %v", err)
	}
	signal.Ignore(syscall.SIGXFSZ)
	lim := syscall.Rlimit{Cur: n, Max: old.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatalf("setrlimit: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old)
		signal.Reset(syscall.SIGXFSZ)
	})
}

// TestSpoolWriteErrorEndsTheFile: a write that fails (here: its file was
// closed under it) fails that Write, every call after it, and Commit.
func TestSpoolWriteErrorEndsTheFile(t *testing.T) {
	s, err := OpenSpool(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Create("broken")
	if err != nil {
		t.Fatal(err)
	}
	// The first write reserves room for several blocks; then the file is
	// closed under the File, which writes the blocks into that room.
	if _, err := f.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := f.f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 128<<10)); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("a write to a closed file: %v", err)
	}
	if _, err := f.Write([]byte("x")); !errors.Is(err, os.ErrClosed) {
		t.Errorf("write after the failure: %v", err)
	}
	if _, err := f.Commit(); err == nil {
		t.Error("a recording whose writes failed was committed")
	}
}

// FuzzSpoolFile writes arbitrary data in arbitrary pieces: the committed
// recording is the data, with its checksum.
func FuzzSpoolFile(f *testing.F) {
	f.Add([]byte("header\nline\n"), []byte{3, 200})
	f.Add(bytes.Repeat([]byte("0123456789abcdef"), 20000), []byte{255, 0, 17})
	f.Fuzz(func(t *testing.T, data, sizes []byte) {
		s, err := OpenSpool(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		file, err := s.Create("fuzz")
		if err != nil {
			t.Fatal(err)
		}
		rest := data
		for i := 0; len(rest) > 0; i++ {
			n := len(rest)
			if len(sizes) > 0 {
				n = min(n, int(sizes[i%len(sizes)])<<(i%12)+1)
			}
			if _, err := file.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		item, err := file.Commit()
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(s.dir, "fuzz.cast"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, data) || item.SHA256 != sha(data) || item.Size != int64(len(data)) {
			t.Fatalf("committed %+v, %d bytes; wrote %d", item, len(b), len(data))
		}
	})
}
