package recording

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// tmpfs mounts a tmpfs of size bytes on a new temporary directory until the
// test ends: a disk that really fills. Mounting needs root (CAP_SYS_ADMIN);
// without it the test is skipped with that reason.
func tmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root): %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// fill takes every free byte of the file system of dir.
func fill(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return
		}
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 4096)
	for {
		if _, err := f.Write(block); err != nil {
			break
		}
	}
	for {
		if _, err := f.Write(block[:1]); err != nil {
			return
		}
	}
}

// TestSpoolCommitsOnAFullDisk: a recording whose disk filled up under it
// still commits (its checksum file was reserved when it was created), so
// what the user saw is uploaded, not left "incomplete" in the spool until
// the worker restarts. Seen in make chaos (test/faults TestDiskFull/spool):
// an exec printed all of its 50 lines, exit 0, and its recording never
// reached the store: "write …cast.sha256.part: no space left on device".
func TestSpoolCommitsOnAFullDisk(t *testing.T) {
	dir := tmpfs(t, "2m")
	s, err := OpenSpoolLimit(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Create("full")
	if err != nil {
		t.Fatal(err)
	}
	w := NewWriter(f, meta())
	var accepted []byte
	var werr error
	for i := 0; werr == nil && i < 1000; i++ {
		chunk := bytes.Repeat([]byte{byte('a' + i%26)}, 50_000)
		if werr = w.Stdout(chunk); werr == nil {
			accepted = append(accepted, chunk...)
		}
	}
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("writing past a full disk: %v, want ENOSPC", werr)
	}
	fill(t, dir)
	item, err := f.Commit()
	if err != nil {
		t.Fatalf("commit on a full disk: %v", err)
	}
	pending, err := s.Pending()
	if err != nil || len(pending) != 1 || pending[0].SHA256 != item.SHA256 {
		t.Fatalf("pending after the commit: %v, %v; want the one recording, sha256 %s", pending, err, item.SHA256)
	}
	b, err := os.ReadFile(filepath.Join(dir, "full.cast"))
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := castOf(t, b); out != string(accepted) || item.SHA256 != sha(b) {
		t.Fatalf("recorded %d bytes of output, %d were accepted", len(out), len(accepted))
	}
}

// TestSpoolDiscardDropsTheReservation: a recording discarded leaves no
// reserved checksum file behind.
func TestSpoolDiscardDropsTheReservation(t *testing.T) {
	s, err := OpenSpool(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Create("gone")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Discard(); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(s.dir, "gone*"))
	if len(left) != 0 {
		t.Fatalf("after Discard: %v left in the spool", left)
	}
}
