package recstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	"github.com/limenhq/limen/gateway/audit"
)

// The bucket store's unit tests run on gocloud.dev's in-memory bucket; the
// same store against a real S3 server is s3_test.go.

func openMem(t *testing.T) (*Store, *blob.Bucket) {
	t.Helper()
	b := memblob.OpenBucket(nil)
	t.Cleanup(func() { b.Close() })
	return fromBucket(b, "mem://test"), b
}

func TestBucketUploadVerifiesAndStores(t *testing.T) {
	s, b := openMem(t)
	testBucketUpload(t, s, b)
}

// testBucketUpload: a wrong checksum leaves no object; the right one is
// stored under CLUSTER/ID/SHA256.cast and reads back verified; sent again it
// is acknowledged without a byte; another recording under its id is
// refused.
func testBucketUpload(t *testing.T, s *Store, b *blob.Bucket) {
	t.Helper()
	ctx := context.Background()
	data := bytes.Repeat([]byte("recording line\n"), 500000) // 7.5 MB: more than one part
	sum := sumOf(data)
	if r, _, _ := upload(t, s, "demo", "s1", data, strings.Repeat("0", 64)); r.Status != Refused || !strings.Contains(r.Reason, "start over") {
		t.Fatalf("a wrong checksum: %+v", r)
	}
	if keys := bucketKeys(t, b); len(keys) != 0 {
		t.Fatalf("a refused upload left objects %v", keys)
	}
	if r, err, _ := upload(t, s, "demo", "s1", data, sum); err != nil || r != (Reply{Status: Stored, Offset: int64(len(data)), SHA256: sum}) {
		t.Fatalf("upload: %+v %v", r, err)
	}
	if keys := bucketKeys(t, b); len(keys) != 1 || keys[0] != "demo/s1/"+sum+".cast" {
		t.Fatalf("objects %v, want the one recording", keys)
	}
	r, err, read := upload(t, s, "demo", "s1", data, sum)
	if err != nil || r.Status != Stored || r.Offset != int64(len(data)) || read > int64(MaxHeaderSize) {
		t.Fatalf("a stored recording sent again: %+v %v, %d bytes read", r, err, read)
	}
	if r, _, _ := upload(t, s, "demo", "s1", []byte("other\n"), sumOf([]byte("other\n"))); r.Status != Refused || !strings.Contains(r.Reason, "never replaced") {
		t.Fatalf("another recording under a stored id: %+v", r)
	}
	rd, info, err := s.Open("s1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rd)
	if err != nil || !bytes.Equal(got, data) || info.Cluster != "demo" || info.SHA256 != sum || info.Size != int64(len(data)) {
		t.Fatalf("read back: %v, %d bytes, %+v", err, len(got), info)
	}
	// A range read after a seek.
	if _, err := rd.Seek(int64(len(data))-15, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if tail, err := io.ReadAll(rd); err != nil || string(tail) != "recording line\n" {
		t.Fatalf("range read: %q %v", tail, err)
	}
	rd.Close()
	if u, err := s.Usage(); err != nil || u.Used != int64(len(data)) || u.Recordings != 1 || u.Max != 0 {
		t.Fatalf("usage %+v %v", u, err)
	}
	_ = ctx
}

func bucketKeys(t *testing.T, b *blob.Bucket) []string {
	t.Helper()
	var keys []string
	it := b.List(nil)
	for {
		obj, err := it.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return keys
		}
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, obj.Key)
	}
}

// TestBucketUploadCutOff: an upload cut off leaves no object (an object
// store cannot append); the next upload starts at 0 and completes.
func TestBucketUploadCutOff(t *testing.T) {
	s, b := openMem(t)
	data := bytes.Repeat([]byte("x"), 300<<10)
	worker, proxy := net.Pipe()
	served := make(chan error, 1)
	go func() {
		defer proxy.Close()
		_, err := s.Serve(proxy, "demo", func(string) error { return nil })
		served <- err
	}()
	if err := WriteHeader(worker, Header{ID: "cut", Size: int64(len(data)), SHA256: sumOf(data)}); err != nil {
		t.Fatal(err)
	}
	if r, err := ReadReply(worker); err != nil || r.Status != Resume || r.Offset != 0 {
		t.Fatalf("offer: %+v %v", r, err)
	}
	if _, err := worker.Write(data[:100<<10]); err != nil {
		t.Fatal(err)
	}
	worker.Close()
	if err := <-served; !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a cut-off upload: %v, want it cut short", err)
	}
	if keys := bucketKeys(t, b); len(keys) != 0 {
		t.Fatalf("a cut-off upload left objects %v", keys)
	}
	if r, err, _ := upload(t, s, "demo", "cut", data, sumOf(data)); err != nil || r.Status != Stored {
		t.Fatalf("the upload after: %+v %v", r, err)
	}
}

// TestBucketReadWithholdsChange: a recording changed in the bucket after it
// was stored never reads whole: the read that would complete it fails.
func TestBucketReadWithholdsChange(t *testing.T) {
	s, b := openMem(t)
	data := bytes.Repeat([]byte("ok\n"), 1000)
	if r, err, _ := upload(t, s, "demo", "s1", data, sumOf(data)); err != nil || r.Status != Stored {
		t.Fatalf("upload: %+v %v", r, err)
	}
	bad := bytes.Clone(data)
	bad[10] = 'X'
	if err := b.WriteAll(context.Background(), objectKey("demo", "s1", sumOf(data)), bad, nil); err != nil {
		t.Fatal(err)
	}
	rd, _, err := s.Open("s1")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	got, err := io.ReadAll(rd)
	if err == nil || !strings.Contains(err.Error(), "changed") || len(got) >= len(data) {
		t.Fatalf("a changed recording read %d of %d bytes, err %v", len(got), len(data), err)
	}
}

func TestParseKey(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	for key, ok := range map[string]bool{
		"demo/s1/" + sum + ".cast":                               true,
		"demo/s1/" + sum:                                         false,
		"demo/s1/" + strings.ToUpper(sum) + ".cast":              false,
		"demo/s1/" + sum[:62] + ".cast":                          false,
		"s1/" + sum + ".cast":                                    false,
		"a/demo/s1/" + sum + ".cast":                             false,
		"../s1/" + sum + ".cast":                                 false,
		"demo/../" + sum + ".cast":                               false,
		".limen-probe":                                           false,
		"demo/s1/" + sum + ".cast/x":                             false,
		"demo/" + strings.Repeat("i", 129) + "/" + sum + ".cast": false,
	} {
		c, id, got, parsed := parseKey(key)
		if parsed != ok {
			t.Errorf("parseKey(%q) = %v, want %v", key, parsed, ok)
		}
		if parsed && objectKey(c, id, got) != key {
			t.Errorf("parseKey(%q) does not round-trip: %q %q %q", key, c, id, got)
		}
	}
}

// FuzzParseKey: whatever a bucket holds, a key parsed is one objectKey
// writes, naming single path elements.
func FuzzParseKey(f *testing.F) {
	f.Add("demo/s1/" + strings.Repeat("0", 64) + ".cast")
	f.Add("a/b/c.cast")
	f.Fuzz(func(t *testing.T, key string) {
		c, id, sum, ok := parseKey(key)
		if !ok {
			return
		}
		if objectKey(c, id, sum) != key || strings.Contains(c+id, "/") || c == ".." || id == ".." {
			t.Fatalf("parseKey(%q) = %q %q %q", key, c, id, sum)
		}
	})
}

// sink records the events emitted.
type sink struct{ events []audit.Event }

func (s *sink) Emit(_ context.Context, e audit.Event) error {
	if err := e.Validate(); err != nil {
		return err
	}
	s.events = append(s.events, e)
	return nil
}

// TestRetention: a run deletes what is older than Keep, in batches, keeps
// the rest, and is audited as one recording.retention event with its
// counts, in a directory and in a bucket alike.
func TestRetention(t *testing.T) {
	dirStore, _ := open(t)
	memStore, _ := openMem(t)
	for name, s := range map[string]*Store{"dir": dirStore, "bucket": memStore} {
		t.Run(name, func(t *testing.T) {
			for _, id := range []string{"a", "b", "c", "d", "e"} {
				data := []byte("recording " + id + "\n")
				if r, err, _ := upload(t, s, "demo", id, data, sumOf(data)); err != nil || r.Status != Stored {
					t.Fatalf("upload %s: %+v %v", id, r, err)
				}
			}
			all, _ := s.List()
			newest := all[len(all)-1].Time
			var events sink
			r := &Retention{Store: s, Keep: time.Hour, Batch: 2, Audit: &events, Logger: discard(),
				Now: func() time.Time { return newest.Add(30 * time.Minute) }}
			if res, err := r.RunOnce(context.Background()); err != nil || res.Deleted != 0 || res.Kept != 5 {
				t.Fatalf("nothing old yet: %+v %v", res, err)
			}
			r.Now = func() time.Time { return newest.Add(2 * time.Hour) }
			res, err := r.RunOnce(context.Background())
			if err != nil || res.Deleted != 5 || res.Kept != 0 || res.Failed != 0 || !res.OldestKept.IsZero() {
				t.Fatalf("all old: %+v %v", res, err)
			}
			if left, _ := s.List(); len(left) != 0 {
				t.Fatalf("left after retention: %+v", left)
			}
			if len(events.events) != 2 {
				t.Fatalf("%d events, want one per run", len(events.events))
			}
			ev := events.events[1]
			if ev.Type != TypeRetention || ev.Fields["deleted"] != "5" || ev.Fields["kept"] != "0" || ev.Fields["deleted_bytes"] == "0" {
				t.Fatalf("event %+v", ev)
			}
			if events.events[0].Fields["deleted"] != "0" || events.events[0].Fields["oldest_kept"] == "" {
				t.Fatalf("first event %+v", events.events[0])
			}
		})
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestRetentionKeepsNewer: only what is older than Keep goes; the store's
// count of its bytes follows, and the next upload still fits.
func TestRetentionKeepsNewer(t *testing.T) {
	s, dir := open(t)
	for _, id := range []string{"old", "new"} {
		data := []byte("recording " + id + "\n")
		if r, err, _ := upload(t, s, "demo", id, data, sumOf(data)); err != nil || r.Status != Stored {
			t.Fatalf("upload %s: %+v %v", id, r, err)
		}
	}
	old := time.Now().Add(-48 * time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "demo", "old.cast"), old, old); err != nil {
		t.Fatal(err)
	}
	trail, err := audit.Open(context.Background(), filepath.Join(t.TempDir(), "audit.db"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer trail.Close()
	var events sink
	r := &Retention{Store: s, Keep: 24 * time.Hour, Audit: multiSink{trail, &events}, Logger: discard()}
	res, err := r.RunOnce(context.Background())
	if err != nil || res.Deleted != 1 || res.Kept != 1 || res.OldestKept.Before(time.Now().Add(-time.Hour)) {
		t.Fatalf("retention: %+v %v", res, err)
	}
	if _, err := s.Find("old"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the old recording: %v", err)
	}
	if _, err := s.Find("new"); err != nil {
		t.Fatalf("the new recording: %v", err)
	}
	if u, err := s.Usage(); err != nil || s.used != u.Used {
		t.Fatalf("the store counts %d bytes, the disk holds %+v (%v)", s.used, u, err)
	}
	if len(events.events) != 1 || events.events[0].Fields["deleted"] != "1" || events.events[0].Fields["kept"] != "1" {
		t.Fatalf("events %+v", events.events)
	}
	stored, err := trail.Search(context.Background(), audit.Query{Type: TypeRetention})
	if err != nil || len(stored) != 1 || stored[0].Fields["deleted"] != "1" {
		t.Fatalf("the audit store holds %+v (%v), want the run's event", stored, err)
	}
}

// multiSink emits to each sink in turn.
type multiSink []audit.Sink

func (m multiSink) Emit(ctx context.Context, e audit.Event) error {
	for _, s := range m {
		if err := s.Emit(ctx, e); err != nil {
			return err
		}
	}
	return nil
}
