package proxy_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/tunnel"
)

func hexSum(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// TestHostileWorkerUploadStream: on its own upload streams, a compromised
// worker sends path-traversing ids, lies about a recording's size and
// checksum, overwrites a stored recording, uploads one recording twice at
// once, announces more than the store's limit, opens streams of unknown
// kinds and more streams than allowed. Each is refused and nothing of it is
// stored or written outside the store; an honest upload (the control) is
// stored, and the worker's tunnel stays up through it all.
func TestHostileWorkerUploadStream(t *testing.T) {
	const limit = 1 << 20
	e := startHostile(t, nil, func(c *proxy.Config) { c.RecordingStoreMaxBytes = limit })
	ids := map[string]string{}
	for _, name := range []string{"honest", "liar", "short", "long", "twice", "huge", "held0", "held1", "held2", "held3"} {
		id := strings.Repeat("0", 32-2*len(name)) + hex.EncodeToString([]byte(name))
		ids[name] = id
		live, err := e.proxy.Sessions.Track(context.Background(), sessions.Session{ID: id, Principal: alice, Cluster: testCluster,
			Kind: sessions.KindExec, Expires: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		defer live.End(sessions.ReasonCompleted)
	}
	session := e.proxy.Tunnel.Workers()[0].SessionID
	honest := bytes.Repeat([]byte("honest output\n"), 1000)
	if why := e.worker.upload(ids["honest"], honest); why != "" {
		t.Fatalf("the honest upload was refused: %s", why)
	}

	data := []byte("forged recording\n")
	cases := []struct {
		name   string
		upload func() string
		why    string
	}{
		{"a wrong checksum", func() string {
			return e.worker.uploadAs(recstore.Header{ID: ids["liar"], Size: int64(len(data)), SHA256: hexSum([]byte("other"))}, data)
		}, "start over"},
		{"fewer bytes than announced", func() string {
			return e.worker.raw(recstore.Header{ID: ids["short"], Size: int64(len(data)) + 10, SHA256: hexSum(data)}, data)
		}, "cut off 10 bytes short"},
		{"more bytes than announced", func() string {
			// The store takes the announced size, and the checksum over
			// those bytes is not the one announced.
			return e.worker.raw(recstore.Header{ID: ids["long"], Size: 5, SHA256: hexSum(data)}, data)
		}, "start over"},
		{"an overwrite of a stored recording", func() string { return e.worker.upload(ids["honest"], data) }, "never replaced"},
		{"more than the store's limit", func() string {
			return e.worker.uploadAs(recstore.Header{ID: ids["huge"], Size: limit + 1, SHA256: hexSum(data)}, data)
		}, "recording store is full"},
		{"the same recording twice at once", func() string {
			first, err := e.worker.open()
			if err != nil {
				return err.Error()
			}
			defer first.Close()
			if err := recstore.WriteHeader(first, recstore.Header{ID: ids["twice"], Size: 100, SHA256: hexSum(data)}); err != nil {
				return err.Error()
			}
			if r, err := recstore.ReadReply(first); err != nil || r.Status != recstore.Resume {
				return "first offer: " + r.Reason
			}
			return e.worker.upload(ids["twice"], data)
		}, "being uploaded already"},
		{"a session the proxy never relayed", func() string { return e.worker.upload(otherSession, data) }, "which this proxy did not relay"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if why := c.upload(); !strings.Contains(why, c.why) {
				t.Fatalf("the proxy answered %q, want a refusal with %q", why, c.why)
			}
		})
	}

	// Ids that would leave the store: the header is refused, and the
	// worker's own encoder would not even write them.
	for _, id := range []string{"../../escape", "..", "a/b", `a\b`, ".hidden", strings.Repeat("a", 129)} {
		conn, err := e.worker.open()
		if err != nil {
			t.Fatal(err)
		}
		raw := append([]byte("LRU1"), byte(len(id)))
		raw = append(raw, id...)
		raw = append(raw, make([]byte, 8+32)...)
		_, _ = conn.Write(raw)
		if b, err := io.ReadAll(conn); len(b) != 0 || err != nil {
			t.Errorf("id %q: the proxy answered %q (%v), want the stream closed", id, b, err)
		}
		conn.Close()
	}

	// A stream of a kind the proxy does not serve is closed unread.
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	odd, err := e.worker.client.OpenStream(ctx, "recording.download")
	if err != nil {
		t.Fatal(err)
	}
	_ = odd.SetDeadline(time.Now().Add(deadline))
	if b, err := io.ReadAll(odd); len(b) != 0 || err != nil {
		t.Errorf("an unknown stream kind: read %q, %v; want it closed", b, err)
	}
	odd.Close()

	// More streams at once than allowed: the one past the limit is closed.
	// Each held stream is being served once the proxy offered it a resume.
	waitUntil(t, "the streams above to end", func() bool { return e.proxy.Tunnel.Workers()[0].Streams == 0 })
	var held []interface{ Close() error }
	for i := range tunnel.DefaultMaxWorkerStreams {
		c, err := e.worker.open()
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if err := recstore.WriteHeader(c, recstore.Header{ID: ids[fmt.Sprintf("held%d", i)], Size: 100, SHA256: hexSum(data)}); err != nil {
			t.Fatal(err)
		}
		if r, err := recstore.ReadReply(c); err != nil || r.Status != recstore.Resume {
			t.Fatalf("held stream %d: offer %+v %v", i, r, err)
		}
	}
	extra, err := e.worker.open()
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(extra); len(b) != 0 || err != nil {
		t.Errorf("a stream past the limit: read %q, %v; want it closed", b, err)
	}
	extra.Close()
	for _, c := range held {
		c.Close()
	}

	store, err := recstore.OpenExisting(recstore.Path(e.dir))
	if err != nil {
		t.Fatal(err)
	}
	stored, err := store.List()
	if err != nil || len(stored) != 1 || stored[0].ID != ids["honest"] || stored[0].SHA256 != hexSum(honest) {
		t.Fatalf("the store holds %+v (%v), want only the honest recording, unchanged", stored, err)
	}
	err = filepath.WalkDir(filepath.Dir(e.dir), func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), "escape") {
			return errors.New("written outside the store: " + p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if w := e.proxy.Tunnel.Workers(); len(w) != 1 || w[0].SessionID != session {
		t.Fatalf("workers %+v, want the hostile worker's session %s still up: refusals do not cost the tunnel", w, session)
	}
}

// raw sends header h, and after the proxy's offer all of data whatever h
// says, half-closes the stream and returns the proxy's final answer.
func (w *hostileWorker) raw(h recstore.Header, data []byte) string {
	conn, err := w.open()
	if err != nil {
		return "open: " + err.Error()
	}
	defer conn.Close()
	if err := recstore.WriteHeader(conn, h); err != nil {
		return err.Error()
	}
	if r, err := recstore.ReadReply(conn); err != nil || r.Status != recstore.Resume {
		return fmt.Sprintf("offer %+v %v", r, err)
	}
	_, _ = conn.Write(data)
	_ = conn.(interface{ CloseWrite() error }).CloseWrite()
	r, err := recstore.ReadReply(conn)
	if err != nil {
		return "read the answer: " + err.Error()
	}
	return r.Reason
}
