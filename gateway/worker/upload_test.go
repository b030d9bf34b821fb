package worker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/gateway/tunnel"
)

// storeLink stands in for the tunnel between the uploader and the proxy's
// real recording store: it hands each chunk to the store and answers with
// its Ack, except for the recordings named in refuse. It counts the chunks
// each recording sent.
type storeLink struct {
	store *recstore.Store

	mu     sync.Mutex
	refuse map[string]bool
	chunks map[string]int
}

func (l *storeLink) Request(_ context.Context, m tunnel.Message) (tunnel.Message, error) {
	var c recstore.Chunk
	if err := m.Decode(&c); err != nil {
		return tunnel.Message{}, err
	}
	l.mu.Lock()
	l.chunks[c.ID]++
	refused := l.refuse[c.ID]
	l.mu.Unlock()
	ack := recstore.Ack{ID: c.ID, Error: "refused by the test"}
	if !refused {
		ack = l.store.Put("demo", c)
	}
	return tunnel.NewMessage(recstore.MsgAck, ack)
}

func (l *storeLink) sent(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.chunks[id]
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
	link := &storeLink{store: store, refuse: map[string]bool{}, chunks: map[string]int{}}
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
	for link.sent("a-stuck") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the uploader never tried the first recording")
		}
		time.Sleep(10 * time.Millisecond)
	}
	data := bytes.Repeat([]byte("later\n"), 30000) // several chunks
	spoolRecording(t, spool, "b-later", data)
	deadline = time.Now().Add(20 * time.Second)
	u.Kick()
	waitStored(t, link.store, "b-later", data)
	if n := link.sent("a-stuck"); n != 1 {
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
// could not drop its copy (its spool failed after the final Ack). The next
// upload stops at the first chunk and drops the copy when the checksums
// match; a copy that differs from what the proxy stores is kept, and said.
func TestUploaderAlreadyStored(t *testing.T) {
	u, spool, link := newUploadRig(t)
	data := bytes.Repeat([]byte("recorded\n"), 30000) // several chunks
	it := spoolRecording(t, spool, "s1", data)
	// The proxy has it already: uploaded by hand, the spool not told.
	if err := u.upload(context.Background(), it); err != nil {
		t.Fatal(err)
	}
	first := link.sent("s1")
	spoolRecording(t, spool, "s1", data) // the spool holds it again, as after a failed Ack
	if err := u.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := link.sent("s1") - first; n != 1 {
		t.Errorf("already stored: %d chunks sent again, want only the first", n)
	}
	if items, _ := spool.Pending(); len(items) != 0 {
		t.Fatalf("the spool still holds %+v after the proxy confirmed the checksum", items)
	}

	// Another recording under the same id: never dropped.
	other := spoolRecording(t, spool, "s1", []byte("something else\n"))
	err := u.upload(context.Background(), other)
	if err == nil || !strings.Contains(err.Error(), "checksum") {
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
	if n := link.sent("s1"); n != 0 {
		t.Fatalf("%d chunks sent with the tunnel down", n)
	}
}

// TestUploaderKeepsWhatAFullStoreRefuses: a proxy whose recording store is
// full refuses the upload at its first chunk and says so; the recording
// stays in the spool, whole, and reaches the store once it has room.
func TestUploaderKeepsWhatAFullStoreRefuses(t *testing.T) {
	u, spool, link := newUploadRig(t)
	dir := t.TempDir()
	store, err := recstore.OpenLimit(dir, 100<<10)
	if err != nil {
		t.Fatal(err)
	}
	link.store = store
	data := bytes.Repeat([]byte("recorded\n"), 20000) // 180 KB, several chunks
	it := spoolRecording(t, spool, "big", data)
	err = u.upload(context.Background(), it)
	if err == nil || !strings.Contains(err.Error(), "recording store is full") || !strings.Contains(err.Error(), "stays in the worker's spool") {
		t.Fatalf("upload into a full store: %v, want the store's refusal", err)
	}
	if n := link.sent("big"); n != 1 {
		t.Errorf("%d chunks sent to a store without room, want the first only", n)
	}
	if items, _ := spool.Pending(); len(items) != 1 || items[0].SHA256 != it.SHA256 {
		t.Fatalf("spool after the refusal: %+v, want the recording kept whole", items)
	}

	// The operator raises the limit (the proxy restarts with it).
	if link.store, err = recstore.OpenLimit(dir, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := u.upload(context.Background(), it); err != nil {
		t.Fatalf("upload with room: %v", err)
	}
	waitStored(t, link.store, "big", data)
	if items, _ := spool.Pending(); len(items) != 0 {
		t.Fatalf("spool after the upload: %+v, want it dropped", items)
	}
}
