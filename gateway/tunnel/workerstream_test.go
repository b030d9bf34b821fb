package tunnel

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWorkerOpenedStreams: a stream the worker opens reaches OnStream with
// its kind and its bytes, in both directions, while the control stream and
// the proxy's own streams work beside it; a stream whose kind frame is
// missing, malformed or too long is closed before OnStream; and past
// MaxWorkerStreams open at once the next stream is closed, until one ends.
func TestWorkerOpenedStreams(t *testing.T) {
	checkGoroutines(t)
	pki := newPKI(t)
	type got struct {
		kind string
		data string
	}
	served := make(chan got, 16)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	timing := testTiming()
	timing.Handshake = 300 * time.Millisecond
	srv := &Server{Logger: testLogger(t), Timing: timing, MaxWorkerStreams: 2,
		OnStream: func(ctx context.Context, w *Worker, kind string, conn net.Conn) {
			if kind == "hold" {
				served <- got{kind: kind}
				select {
				case <-release:
				case <-ctx.Done():
				}
				return
			}
			b, _ := io.ReadAll(conn)
			_, _ = conn.Write([]byte(strings.ToUpper(string(b))))
			served <- got{kind, string(b)}
		}}
	p := startProxy(t, pki, srv, "127.0.0.1:0")
	wk := newWorker(t, pki, p.addr(), "c1", "w1", echo)
	startWorker(t, wk)
	eventually(t, "worker connected", func() bool { return srv.Connected("c1") })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	conn, err := wk.OpenStream(ctx, "upper")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(conn, "bulk bytes")
	_ = conn.(interface{ CloseWrite() error }).CloseWrite()
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	b, err := io.ReadAll(conn)
	if err != nil || string(b) != "BULK BYTES" {
		t.Fatalf("answer on the worker's stream: %q %v", b, err)
	}
	if g := <-served; g != (got{"upper", "bulk bytes"}) {
		t.Fatalf("OnStream saw %+v", g)
	}

	if _, err := wk.OpenStream(ctx, "bad kind"); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("OpenStream with a kind holding a space: %v, want ErrBadMessage", err)
	}

	// Raw streams with broken kind frames, on the worker's session.
	wk.mu.Lock()
	sess := wk.sess
	wk.mu.Unlock()
	for name, first := range map[string][]byte{
		"no frame":       nil,
		"empty frame":    frame(0, ""),
		"too long":       rawFrame(strings.Repeat("k", maxTypeLen+1)),
		"huge length":    frame(0xffffffff, "k"),
		"control bytes":  rawFrame("a\x00b"),
		"cut-off frame":  frame(10, "abc"),
		"not a frame at": []byte("GET / HTTP/1.1\r\n\r\n"),
	} {
		st, err := sess.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		if len(first) > 0 {
			_, _ = st.Write(first)
		}
		_ = st.SetReadDeadline(time.Now().Add(wait))
		if b, err := io.ReadAll(st); len(b) != 0 || err != nil {
			t.Errorf("%s: read %q, %v; want the stream closed", name, b, err)
		}
		_ = st.Close()
	}

	// The limit: two held streams, the third closed; once one ends, a new
	// one is served.
	var held []net.Conn
	for range 2 {
		c, err := wk.OpenStream(ctx, "hold")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		<-served
	}
	extra, err := wk.OpenStream(ctx, "upper")
	if err != nil {
		t.Fatal(err)
	}
	_ = extra.SetReadDeadline(time.Now().Add(wait))
	if b, err := io.ReadAll(extra); len(b) != 0 || err != nil {
		t.Fatalf("a stream past the limit: read %q, %v; want it closed", b, err)
	}
	_ = extra.Close()
	once.Do(func() { close(release) })
	for _, c := range held {
		_ = c.Close()
	}
	eventually(t, "the held streams to end", func() bool { return srv.Workers()[0].Streams == 0 })
	again, err := wk.OpenStream(ctx, "upper")
	if err != nil {
		t.Fatal(err)
	}
	_ = again.(interface{ CloseWrite() error }).CloseWrite()
	_ = again.SetReadDeadline(time.Now().Add(wait))
	if _, err := io.ReadAll(again); err != nil {
		t.Fatal(err)
	}
	if g := <-served; g.kind != "upper" {
		t.Fatalf("after the limit freed up: %+v", g)
	}

	// The proxy's own streams and the control stream work beside them.
	c, err := srv.Open(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "ping")
	buf := make([]byte, 4)
	_ = c.SetReadDeadline(time.Now().Add(wait))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("proxy-opened stream: %q %v", buf, err)
	}
}

// TestOpenStreamOffline: with no session, OpenStream says so.
func TestOpenStreamOffline(t *testing.T) {
	wk := &Client{}
	if _, err := wk.OpenStream(context.Background(), "upper"); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("OpenStream with no session: %v, want ErrNotConnected", err)
	}
}
