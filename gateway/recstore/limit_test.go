package recstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func recordingOf(n int) ([]byte, string) {
	data := bytes.Repeat([]byte("x"), n)
	sum := sha256.Sum256(data)
	return data, hex.EncodeToString(sum[:])
}

// uploadSized uploads data as the worker does, with the recording's size on
// every chunk.
func uploadSized(s *Store, cluster, id string, data []byte, sum string) Ack {
	var ack Ack
	for off := 0; ; off += MaxChunk {
		end := min(off+MaxChunk, len(data))
		c := Chunk{ID: id, Offset: int64(off), Data: data[off:end], Size: int64(len(data))}
		if end == len(data) {
			c.Final, c.SHA256 = true, sum
		}
		if ack = s.Put(cluster, c); ack.Error != "" || c.Final {
			return ack
		}
	}
}

// TestStoreLimitRefusesUploads: a store at its size limit refuses an upload
// that does not fit — at its first chunk when the worker says the size, at
// the chunk that passes the limit when it does not — with an error that
// names the limit and says the recording stays in the worker's spool. A
// refused upload leaves nothing behind, the store never passes its limit,
// and recordings an operator deletes make room without a restart.
func TestStoreLimitRefusesUploads(t *testing.T) {
	const limit = 300 << 10
	dir := t.TempDir()
	s, err := OpenLimit(dir, limit)
	if err != nil {
		t.Fatal(err)
	}
	first, firstSum := recordingOf(200 << 10)
	if ack := uploadSized(s, "demo", "first", first, firstSum); ack.Error != "" {
		t.Fatalf("first upload: %s", ack.Error)
	}
	second, secondSum := recordingOf(200 << 10)
	for _, tt := range []struct {
		name   string
		upload func() Ack
	}{
		{"size announced", func() Ack { return uploadSized(s, "demo", "second", second, secondSum) }},
		{"size not announced", func() Ack { return upload(t, s, "demo", "second", second, secondSum) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ack := tt.upload()
			for _, want := range []string{"recording store is full", "300 KiB limit", "recording-store-max-bytes", "stays in the worker's spool"} {
				if !strings.Contains(ack.Error, want) {
					t.Errorf("ack error %q does not say %q", ack.Error, want)
				}
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

	// The operator deletes the first recording: the second fits.
	for _, f := range []string{"first.cast", "first.cast.sha256"} {
		if err := os.Remove(filepath.Join(dir, "demo", f)); err != nil {
			t.Fatal(err)
		}
	}
	if ack := uploadSized(s, "demo", "second", second, secondSum); ack.Error != "" || ack.SHA256 != secondSum {
		t.Fatalf("upload after making room: %+v", ack)
	}
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
	if ack := uploadSized(s, "demo", "old", data, sum); ack.Error != "" {
		t.Fatal(ack.Error)
	}
	if u, err := s.Usage(); err != nil || u.Max != DefaultMaxBytes || u.Used < 100<<10 {
		t.Fatalf("usage %+v %v, want the recording under the default limit", u, err)
	}
	small, err := OpenLimit(dir, 150<<10)
	if err != nil {
		t.Fatal(err)
	}
	if ack := uploadSized(small, "demo", "new", data, sum); !strings.Contains(ack.Error, "recording store is full") {
		t.Fatalf("upload into a reopened store with no room: %+v", ack)
	}
}
