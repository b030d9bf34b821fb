package recstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func recordingOf(n int) ([]byte, string) {
	data := bytes.Repeat([]byte("x"), n)
	return data, sumOf(data)
}

// TestStoreLimitRefusesUploads: a store at its size limit refuses an upload
// that does not fit at its header, before any byte of it comes, with an
// error that names the limit and says the recording stays in the worker's
// spool. A refused upload leaves nothing behind (not even what an earlier,
// cut-off upload of it left), the store never passes its limit, uploads in
// progress hold their room, and recordings an operator deletes make room
// without a restart.
func TestStoreLimitRefusesUploads(t *testing.T) {
	const limit = 300 << 10
	dir := t.TempDir()
	s, err := OpenLimit(dir, limit)
	if err != nil {
		t.Fatal(err)
	}
	first, firstSum := recordingOf(200 << 10)
	if r, err, _ := upload(t, s, "demo", "first", first, firstSum); err != nil {
		t.Fatalf("first upload: %+v %v", r, err)
	}
	second, secondSum := recordingOf(200 << 10)
	cutOffBefore := func() {
		// What a cut-off upload of it left while there was room.
		if err := os.WriteFile(filepath.Join(dir, "demo", "second.cast.part"), second[:1000], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name   string
		before func()
	}{
		{"new upload", func() {}},
		{"resumed upload", cutOffBefore},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.before()
			r, _, read := upload(t, s, "demo", "second", second, secondSum)
			for _, want := range []string{"recording store is full", "300 KiB limit", "recording-store-max-bytes", "stays in the worker's spool"} {
				if !strings.Contains(r.Reason, want) {
					t.Errorf("refusal %q does not say %q", r.Reason, want)
				}
			}
			if read > int64(MaxHeaderSize) {
				t.Errorf("the store read %d bytes of an upload it refused at the header", read)
			}
			if _, err := s.Find("second"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("a refused upload is stored: %v", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "demo", "second.cast.part")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a refused upload left its part file: %v", err)
			}
			u, err := s.Usage()
			if err != nil {
				t.Fatal(err)
			}
			if u.Used > limit || u.Max != limit || u.Recordings != 1 {
				t.Fatalf("usage %+v, want the one recording within the %d-byte limit", u, limit)
			}
		})
	}

	// The operator deletes the first recording: the second fits, but while
	// it uploads its room is promised and a third that would fit alone
	// does not.
	for _, f := range []string{"first.cast", "first.cast.sha256"} {
		if err := os.Remove(filepath.Join(dir, "demo", f)); err != nil {
			t.Fatal(err)
		}
	}
	up, offer := s.Begin("demo", Header{ID: "second", Size: int64(len(second)), SHA256: secondSum})
	if up == nil {
		t.Fatalf("upload after making room: %+v", offer)
	}
	third, thirdSum := recordingOf(150 << 10)
	if other, r := s.Begin("demo", Header{ID: "third", Size: int64(len(third)), SHA256: thirdSum}); other != nil || !strings.Contains(r.Reason, "recording store is full") {
		t.Fatalf("a third upload beside one in progress: %+v, want it refused for room", r)
	}
	if _, err := up.ReadFrom(bytes.NewReader(second)); err != nil {
		t.Fatal(err)
	}
	if r := up.Commit(); r.Status != Stored || r.SHA256 != secondSum {
		t.Fatalf("commit: %+v", r)
	}
	up.Close()
}

// TestStoreLimitCountsWhatIsThere: a store opened over recordings counts
// them against its limit, and the default limit applies without one.
func TestStoreLimitCountsWhatIsThere(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	data, sum := recordingOf(100 << 10)
	if r, err, _ := upload(t, s, "demo", "old", data, sum); err != nil {
		t.Fatal(r, err)
	}
	if u, err := s.Usage(); err != nil || u.Max != DefaultMaxBytes || u.Used < 100<<10 {
		t.Fatalf("usage %+v %v, want the recording under the default limit", u, err)
	}
	small, err := OpenLimit(dir, 150<<10)
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := upload(t, small, "demo", "new", data, sum); !strings.Contains(r.Reason, "recording store is full") {
		t.Fatalf("upload into a reopened store with no room: %+v", r)
	}
}
