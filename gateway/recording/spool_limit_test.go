package recording

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSpoolLimit: a spool at its limit refuses a new recording with an
// error that names the limit, and refuses a write that would pass it whole,
// so that a recording holds only whole writes and the spool never passes
// its limit; the writer of a recording then fails, which ends its session.
// An upload's acknowledgement, or a discarded recording, makes room again.
// The usage, measured live or beside a running worker, counts every byte.
func TestSpoolLimit(t *testing.T) {
	const limit = 2 * MinMaxBytes // 128 KiB
	dir := t.TempDir()
	s, err := OpenSpoolLimit(dir, limit)
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Create("first")
	if err != nil {
		t.Fatal(err)
	}
	line := append(bytes.Repeat([]byte("x"), 1023), '\n')
	written := 0
	for {
		if _, err = f.Write(line); err != nil {
			break
		}
		if written += len(line); int64(written) > 2*limit {
			t.Fatalf("%d bytes written to a spool limited to %d: its limit is ignored", written, limit)
		}
	}
	var full *SpoolFullError
	if !errors.As(err, &full) || !errors.Is(err, ErrSpoolFull) || full.Max != limit {
		t.Fatalf("write past the limit: %v, want a *SpoolFullError with the limit", err)
	}
	for _, want := range []string{"recording spool is full", "128 KiB limit", "recording-spool-max-bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// On the disk, with the space reserved ahead of its writes, the
	// recording stays within the limit, its checksum file included.
	if fi, err := os.Stat(filepath.Join(dir, "first.cast.part")); err != nil || fi.Size()+sumFileSize > limit {
		t.Fatalf("the recording in progress takes %v bytes (%v), want at most %d", fi.Size(), err, limit-sumFileSize)
	}
	// A writer over the spool reports the refusal, so the relay ends the
	// session.
	w := NewCappedWriter(f, meta(), MinMaxBytes)
	if err := w.Stdout(line); !errors.Is(err, ErrSpoolFull) {
		t.Fatalf("the recording's writer: %v, want ErrSpoolFull", err)
	}
	item, err := f.Commit()
	if err != nil {
		t.Fatal(err)
	}
	// The whole writes accepted, and the writer's header that still fit.
	if item.Size < int64(written) || item.Size+sumFileSize > limit {
		t.Fatalf("the recording holds %d bytes, want the %d of the whole writes accepted and at most %d", item.Size, written, limit-sumFileSize)
	}

	if _, err := s.Create("second"); !errors.Is(err, ErrSpoolFull) {
		t.Fatalf("a new recording in a full spool: %v, want ErrSpoolFull", err)
	}
	u, err := SpoolUsageOf(dir, limit)
	if err != nil {
		t.Fatal(err)
	}
	live, err := s.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if u != live || u.Pending != 1 || u.Used != item.Size+int64(len(item.SHA256)+1) || u.Used > limit {
		t.Fatalf("usage %+v (live %+v), want the one recording and its checksum within %d", u, live, limit)
	}

	// The proxy acknowledges the upload: room again.
	if err := s.Ack(item.ID, item.SHA256); err != nil {
		t.Fatal(err)
	}
	second, err := s.Create("second")
	if err != nil {
		t.Fatalf("a new recording once the first was uploaded: %v", err)
	}
	if _, err := second.Write(line); err != nil {
		t.Fatal(err)
	}
	if err := second.Discard(); err != nil {
		t.Fatal(err)
	}
	if live, _ := s.Usage(); live.Used != 0 {
		t.Fatalf("usage after the upload and a discard: %+v, want nothing", live)
	}
}

// TestSpoolLimitCountsWhatIsThere: a spool opened over recordings a
// previous worker left counts them, and a spool opened without a limit has
// the default.
func TestSpoolLimitCountsWhatIsThere(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "left.cast.part"), bytes.Repeat([]byte("y\n"), 40<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSpoolLimit(dir, 100<<10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create("new"); !errors.Is(err, ErrSpoolFull) {
		t.Fatalf("a new recording beside 80 KiB left behind, limit 100 KiB: %v, want ErrSpoolFull", err)
	}
	d, err := OpenSpool(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if u, _ := d.Usage(); u.Max != DefaultSpoolMaxBytes {
		t.Fatalf("default limit %d, want %d", u.Max, DefaultSpoolMaxBytes)
	}
}
