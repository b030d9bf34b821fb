package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/recstore"
)

// storeLink stands in for the tunnel between the uploader and the proxy's
// real recording store: each stream it opens is a pipe whose other end the
// store serves (recstore.Store.Serve, as the proxy does), refusing the
// recordings named in refuse as the proxy refuses one it did not relay. It
// counts the uploads of each recording and the bytes the store read.
type storeLink struct {
	store *recstore.Store

	mu     sync.Mutex
	refuse map[string]bool
	tries  map[string]int
	read   map[string]int64
	wg     sync.WaitGroup
}

func (l *storeLink) OpenStream(_ context.Context, kind string) (net.Conn, error) {
	if kind != recstore.StreamKind {
		return nil, fmt.Errorf("stream kind %q", kind)
	}
	worker, proxy := net.Pipe()
	l.mu.Lock()
	store := l.store
	l.mu.Unlock()
	l.wg.Go(func() {
		defer proxy.Close()
		c := &countingConn{Conn: proxy}
		res, _ := store.Serve(c, "demo", func(id string) error {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.tries[id]++
			if l.refuse[id] {
				return errors.New("refused by the test")
			}
			return nil
		})
		l.mu.Lock()
		l.read[res.Header.ID] += c.n
		l.mu.Unlock()
	})
	return worker, nil
}

type countingConn struct {
	net.Conn
	n int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n += int64(n)
	return n, err
}

// sent is how many uploads of id the store saw, and the bytes it read of
// them, once every stream ended.
func (l *storeLink) sent(id string) (int, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tries[id], l.read[id]
}

func (l *storeLink) tried(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tries[id]
}

func newUploadRig(t *testing.T) (*Uploader, *recording.Spool, *storeLink) {
	t.Helper()
	spool, err := recording.OpenSpool(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store, err := recstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	link := &storeLink{store: store, refuse: map[string]bool{}, tries: map[string]int{}, read: map[string]int64{}}
	t.Cleanup(link.wg.Wait)
	u := NewUploader(spool, link, nil, slog.New(slog.DiscardHandler))
	return u, spool, link
}

func spoolRecording(t *testing.T, s *recording.Spool, id string, data []byte) recording.Item {
	t.Helper()
	f, err := s.Create(id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	it, err := f.Commit()
	if err != nil {
		t.Fatal(err)
	}
	return it
}

// waitStored waits until the store holds id, or fails after a deadline far
// beyond any upload of these few bytes (the backoffs are set to an hour, so
// an upload held back by them never arrives).
func waitStored(t *testing.T, store *recstore.Store, id string, want []byte) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if r, _, err := store.Open(id); err == nil {
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("stored %s: %v, %d bytes, want %d", id, err, len(got), len(want))
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("recording %s never reached the store", id)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestUploaderOneFailureHoldsBackNoOther: a recording the proxy keeps
// refusing waits for its own backoff; a recording committed after it is
// uploaded at once on its Kick. Before, the failed pass's backoff (up to
// 30 s) held back every later recording.
func TestUploaderOneFailureHoldsBackNoOther(t *testing.T) {
	u, spool, link := newUploadRig(t)
	u.MinBackoff, u.MaxBackoff, u.Poll = time.Hour, time.Hour, time.Hour
	link.refuse["a-stuck"] = true
	spoolRecording(t, spool, "a-stuck", []byte("stuck\n"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// The first pass tried a-stuck and failed.
	deadline := time.Now().Add(20 * time.Second)
	for link.tried("a-stuck") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the uploader never tried the first recording")
		}
		time.Sleep(10 * time.Millisecond)
	}
	data := bytes.Repeat([]byte("later\n"), 30000)
	spoolRecording(t, spool, "b-later", data)
	deadline = time.Now().Add(20 * time.Second)
	u.Kick()
	waitStored(t, link.store, "b-later", data)
	if n := link.tried("a-stuck"); n != 1 {
		t.Errorf("the refused recording was sent %d times within its hour of backoff, want 1", n)
	}
	// The spool drops b-later once the store's Ack is back.
	for {
		items, err := spool.Pending()
		if err == nil && len(items) == 1 && items[0].ID == "a-stuck" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spool after the pass: %+v, %v; want only a-stuck pending", items, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestUploaderAlreadyStored: the proxy stored a recording but the worker
// could not drop its copy (its spool failed after the acknowledgement). The
// next upload stops at the header and drops the copy when the checksums
// match; a copy that differs from what the proxy stores is kept, and said.
func TestUploaderAlreadyStored(t *testing.T) {
	u, spool, link := newUploadRig(t)
	data := bytes.Repeat([]byte("recorded\n"), 30000)
	it := spoolRecording(t, spool, "s1", data)
	// The proxy has it already: uploaded by hand, the spool not told.
	if err := u.upload(context.Background(), it); err != nil {
		t.Fatal(err)
	}
	link.wg.Wait()
	_, first := link.sent("s1")
	spoolRecording(t, spool, "s1", data) // the spool holds it again, as after a failed Ack
	if err := u.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	link.wg.Wait()
	if tries, read := link.sent("s1"); tries != 2 || read-first > int64(recstore.MaxHeaderSize) {
		t.Errorf("already stored: %d uploads, %d bytes read again; want 2 and only the header", tries, read-first)
	}
	if items, _ := spool.Pending(); len(items) != 0 {
		t.Fatalf("the spool still holds %+v after the proxy confirmed the checksum", items)
	}

	// Another recording under the same id: never dropped.
	other := spoolRecording(t, spool, "s1", []byte("something else\n"))
	err := u.upload(context.Background(), other)
	if err == nil || !strings.Contains(err.Error(), "never replaced") {
		t.Fatalf("a different recording under a stored id: %v, want a refusal about the checksum", err)
	}
	if items, _ := spool.Pending(); len(items) != 1 {
		t.Fatalf("the differing copy was dropped: pending %+v", items)
	}
}

// TestUploaderOfflineStopsThePass: with the tunnel down nothing is tried.
func TestUploaderOfflineStopsThePass(t *testing.T) {
	u, spool, link := newUploadRig(t)
	u.Connected = func() bool { return false }
	spoolRecording(t, spool, "s1", []byte("x\n"))
	if err := u.pass(context.Background()); !errors.Is(err, errOffline) {
		t.Fatalf("pass with the tunnel down: %v, want errOffline", err)
	}
	if n := link.tried("s1"); n != 0 {
		t.Fatalf("%d uploads with the tunnel down", n)
	}
}

// TestUploaderKeepsWhatAFullStoreRefuses: a proxy whose recording store is
// full refuses the upload at its first chunk and says so; the recording
// stays in the spool, whole, and reaches the store once it has room. No
// byte of it is sent to a store without room.
func TestUploaderKeepsWhatAFullStoreRefuses(t *testing.T) {
	u, spool, link := newUploadRig(t)
	dir := t.TempDir()
	store, err := recstore.OpenLimit(dir, 100<<10)
	if err != nil {
		t.Fatal(err)
	}
	link.store = store
	data := bytes.Repeat([]byte("recorded\n"), 20000) // 180 KB
	it := spoolRecording(t, spool, "big", data)
	err = u.upload(context.Background(), it)
	if err == nil || !strings.Contains(err.Error(), "recording store is full") || !strings.Contains(err.Error(), "stays in the worker's spool") {
		t.Fatalf("upload into a full store: %v, want the store's refusal", err)
	}
	link.wg.Wait()
	if tries, read := link.sent("big"); tries != 1 || read > int64(recstore.MaxHeaderSize) {
		t.Errorf("%d uploads, %d bytes read by a store without room; want 1 and only the header", tries, read)
	}
	if items, _ := spool.Pending(); len(items) != 1 || items[0].SHA256 != it.SHA256 {
		t.Fatalf("spool after the refusal: %+v, want the recording kept whole", items)
	}

	// The operator raises the limit (the proxy restarts with it).
	bigger, err := recstore.OpenLimit(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	link.mu.Lock()
	link.store = bigger
	link.mu.Unlock()
	if err := u.upload(context.Background(), it); err != nil {
		t.Fatalf("upload with room: %v", err)
	}
	waitStored(t, link.store, "big", data)
	if items, _ := spool.Pending(); len(items) != 0 {
		t.Fatalf("spool after the upload: %+v, want it dropped", items)
	}
}

// TestUploaderResumes: an upload cut off (the tunnel dropped) left part of
// the recording at the proxy; the next upload sends only the rest, and the
// recording leaves the spool once the proxy acknowledged its SHA-256 over
// the whole file.
func TestUploaderResumes(t *testing.T) {
	u, spool, link := newUploadRig(t)
	data := bytes.Repeat([]byte("0123456789abcdef\n"), 60000) // 1 MB
	it := spoolRecording(t, spool, "s1", data)
	const cut = 700000
	worker, proxy := net.Pipe()
	served := make(chan error, 1)
	go func() {
		defer proxy.Close()
		_, err := link.store.Serve(proxy, "demo", func(string) error { return nil })
		served <- err
	}()
	if err := recstore.WriteHeader(worker, recstore.Header{ID: it.ID, Size: it.Size, SHA256: it.SHA256}); err != nil {
		t.Fatal(err)
	}
	if r, err := recstore.ReadReply(worker); err != nil || r.Status != recstore.Resume || r.Offset != 0 {
		t.Fatalf("first offer: %+v %v", r, err)
	}
	if _, err := worker.Write(data[:cut]); err != nil {
		t.Fatal(err)
	}
	worker.Close() // the tunnel drops
	if err := <-served; !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("the cut-off upload: %v", err)
	}

	if err := u.upload(context.Background(), it); err != nil {
		t.Fatalf("resumed upload: %v", err)
	}
	link.wg.Wait()
	if _, read := link.sent("s1"); read > int64(len(data)-cut+recstore.MaxHeaderSize) {
		t.Errorf("the resumed upload sent %d bytes, want the %d left and the header", read, len(data)-cut)
	}
	waitStored(t, link.store, "s1", data)
	if items, _ := spool.Pending(); len(items) != 0 {
		t.Fatalf("spool after the upload: %+v, want it dropped", items)
	}
}
