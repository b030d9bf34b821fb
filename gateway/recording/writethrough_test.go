package recording

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSpoolCrashKeepsEveryRelayedByte relays output as the worker does
// (each chunk handed to the Writer, and relayed only once that returned
// nil) and, after every chunk, kills the worker there: the spool file is
// read as the kernel holds it at that moment (no Close, no flush, no
// Commit: what a kill -9 leaves), recovered by OpenSpool in a fresh spool,
// and the recovered recording must hold every byte relayed so far. This
// is the ADR's rule, output is recorded before it reaches the user, against
// a process crash (issue #32: the recording ended at tick-38 while kubectl
// had printed tick-39).
func TestSpoolCrashKeepsEveryRelayedByte(t *testing.T) {
	s, err := OpenSpool(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Create("live")
	if err != nil {
		t.Fatal(err)
	}
	defer f.abandon()
	w := newWriter(f, meta(), fixedNow, DefaultMaxBytes)
	part := filepath.Join(s.dir, "live.cast.part")

	var relayed strings.Builder // what the user has seen
	chunks := make([][]byte, 0, 64)
	for i := range 48 {
		chunks = append(chunks, fmt.Appendf(nil, "tick-%d\r\n", i))
	}
	// A burst larger than any buffer a writer might gather, and small
	// chunks after it.
	chunks = append(chunks, bytes.Repeat([]byte("0123456789abcdef"), 40<<10), []byte("$ "), []byte("exit\r\n"))
	for i, c := range chunks {
		if err := w.Stdout(c); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		relayed.Write(c) // the relay passes the chunk on: the user has it

		// The worker dies here.
		if got := recoverCopy(t, part); got != relayed.String() {
			t.Fatalf("killed after relaying chunk %d (%d bytes relayed): the recovered recording holds %d bytes of output, ending %q; want every relayed byte, ending %q",
				i, relayed.Len(), len(got), lastBytes(got), lastBytes(relayed.String()))
		}
	}
}

// recoverCopy recovers a copy of the spool file part as it is now in a
// spool of its own and returns the output of the recovered recording.
func recoverCopy(t *testing.T, part string) string {
	t.Helper()
	b, err := os.ReadFile(part)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(part)), b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSpool(dir)
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	items, err := s.Pending()
	if err != nil || len(items) != 1 {
		t.Fatalf("recovered %v, %v; want one recording", items, err)
	}
	rc, err := s.Open(items[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	rec := mustRead(t, rc)
	if len(bytes.TrimSpace(rec)) == 0 {
		return "" // nothing but zeros reached the file: not even the header
	}
	out, _ := castOf(t, rec)
	return out
}

// lastBytes is the end of s, for messages.
func lastBytes(s string) string {
	if len(s) > 24 {
		return "…" + s[len(s)-24:]
	}
	return s
}

// TestSpoolSyncsOffThePath: written output is synced to the disk without a
// Commit, within syncEvery for a trickle and at once (not waiting for the
// timer) for syncBytes, and the sync's failure ends the File.
func TestSpoolSyncsOffThePath(t *testing.T) {
	s, err := OpenSpool(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Create("trickle")
	if err != nil {
		t.Fatal(err)
	}
	defer f.abandon()
	synced := func(within time.Duration) bool {
		for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			f.mu.Lock()
			done := f.unsynced == 0 && !f.syncing
			f.mu.Unlock()
			if done {
				return true
			}
		}
		return false
	}
	if _, err := f.Write([]byte("one line\n")); err != nil {
		t.Fatal(err)
	}
	if !synced(syncEvery + 5*time.Second) {
		t.Fatalf("a line written %v ago is not synced", syncEvery+5*time.Second)
	}
	// A trickle schedules the sync; a burst then starts it at once.
	for _, p := range [][]byte{[]byte("x"), make([]byte, syncBytes)} {
		if _, err := f.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	if !synced(syncEvery / 2) {
		t.Errorf("%d unsynced bytes wait for the timer", syncBytes)
	}

	// A sync that fails (its file closed under it) ends the File.
	if _, err := f.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	f.fdMu.Lock()
	_ = f.f.Close()
	f.fdMu.Unlock()
	synced(syncEvery + 5*time.Second)
	if _, err := f.Commit(); err == nil || !strings.Contains(err.Error(), "spool sync trickle") {
		t.Errorf("commit after a failed sync: %v; want the sync's error", err)
	}
}
