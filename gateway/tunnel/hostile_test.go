package tunnel

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// rawWorker dials the proxy like a worker and accepts the control stream,
// leaving the bytes on it to the test.
func rawWorker(t *testing.T, pki *testPKI, addr, cluster string) (*yamux.Session, net.Conn) {
	t.Helper()
	cfg := pki.workerTLS(t, cluster)
	cfg.NextProtos = []string{ALPN}
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := yamux.Server(conn, yamuxConfig(testTiming().withDefaults(), logger(nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	st, err := sess.AcceptStreamWithContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return sess, st
}

func rawFrame(payload string) []byte { return frame(uint32(len(payload)), payload) }

func writeMsg(t *testing.T, w io.Writer, m Message) {
	t.Helper()
	b, err := encodeMessage(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteFrame(w, b); err != nil {
		t.Fatal(err)
	}
}

// TestServerRefusesHostileHello drives ServeConn with broken or malicious
// first bytes on the control stream: each must end the session with an
// error, promptly, without registering the worker.
func TestServerRefusesHostileHello(t *testing.T) {
	hello := func(h Hello) []byte {
		m, _ := NewMessage(TypeHello, h)
		b, _ := encodeMessage(m)
		return frame(uint32(len(b)), string(b))
	}
	tests := []struct {
		name    string
		send    []byte
		close   bool // close the stream after sending
		wantErr error
	}{
		{name: "http request", send: []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), wantErr: ErrFrameTooLarge},
		{name: "huge length", send: frame(0xffffffff, "{"), wantErr: ErrFrameTooLarge},
		{name: "just over cap", send: frame(MaxFrameSize+1, "{"), wantErr: ErrFrameTooLarge},
		{name: "empty frame", send: frame(0, ""), wantErr: ErrEmptyFrame},
		{name: "not json", send: rawFrame("abc"), wantErr: ErrBadMessage},
		{name: "heartbeat first", send: rawFrame(`{"type":"heartbeat"}`), wantErr: ErrBadMessage},
		{name: "hello without body", send: rawFrame(`{"type":"hello"}`), wantErr: ErrBadMessage},
		{name: "hello body is a string", send: rawFrame(`{"type":"hello","body":"c1 w1"}`), wantErr: ErrBadMessage},
		{name: "hello body is null", send: rawFrame(`{"type":"hello","body":null}`), wantErr: ErrBadMessage},
		{name: "hello cluster wrong kind", send: rawFrame(`{"type":"hello","body":{"cluster":1}}`), wantErr: ErrBadMessage},
		{name: "hello without worker id", send: hello(Hello{Cluster: "c1"}), wantErr: ErrBadMessage},
		{name: "hello for another cluster", send: hello(Hello{Cluster: "prod", WorkerID: "w"}), wantErr: ErrRefused},
		{name: "truncated then closed", send: frame(100, `{"type":"hello"`), close: true, wantErr: io.ErrUnexpectedEOF},
		{name: "silent", send: nil, wantErr: os.ErrDeadlineExceeded},
	}
	pki := newPKI(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkGoroutines(t)
			timing := testTiming()
			timing.Handshake = 300 * time.Millisecond
			srv := &Server{Logger: testLogger(t), Timing: timing}
			p := startProxy(t, pki, srv, "127.0.0.1:0")
			_, st := rawWorker(t, pki, p.addr(), "c1")
			if len(tt.send) > 0 {
				// The proxy may refuse and hang up before the write is
				// confirmed; that is the behaviour under test, not a failure.
				_, _ = st.Write(tt.send)
			}
			if tt.close {
				_ = st.Close()
			}
			select {
			case err := <-p.errs:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("ServeConn = %v, want %v", err, tt.wantErr)
				}
			case <-time.After(wait):
				t.Fatal("ServeConn still running")
			}
			if len(srv.Workers()) != 0 {
				t.Fatalf("hostile worker registered: %+v", srv.Workers())
			}
		})
	}
}

// TestServerDropsSilentWorker: a worker that completes the hello and then
// never sends another control frame is dropped after PeerTimeout, even
// though its yamux layer still answers pings.
func TestServerDropsSilentWorker(t *testing.T) {
	checkGoroutines(t)
	pki := newPKI(t)
	srv := &Server{Logger: testLogger(t), Timing: testTiming()}
	p := startProxy(t, pki, srv, "127.0.0.1:0")
	sess, st := rawWorker(t, pki, p.addr(), "c1")
	hello, _ := NewMessage(TypeHello, Hello{Cluster: "c1", WorkerID: "w"})
	writeMsg(t, st, hello)
	eventually(t, "silent worker registered", func() bool { return srv.Connected("c1") })

	// A stream the worker opens is refused, not left in the backlog.
	own, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	_ = own.SetReadDeadline(time.Now().Add(wait))
	if _, err := own.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("worker-opened stream read = %v, want io.EOF (closed by proxy)", err)
	}

	// Drain the proxy's heartbeats so only our silence matters.
	go func() { _, _ = io.Copy(io.Discard, st) }()
	select {
	case err := <-p.errs:
		if !isTimeout(err) {
			t.Fatalf("ServeConn = %v, want a peer timeout", err)
		}
	case <-time.After(wait):
		t.Fatal("silent worker never dropped")
	}
	if srv.Connected("c1") {
		t.Fatal("silent worker still registered")
	}
}

// TestClientDropsSilentProxy: a proxy that acknowledges the hello and then
// goes quiet on the control stream is abandoned and redialled.
func TestClientDropsSilentProxy(t *testing.T) {
	checkGoroutines(t)
	pki := newPKI(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{pki.server},
		NextProtos:   []string{ALPN},
		MinVersion:   tls.VersionTLS13,
	})
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			silentProxy(c)
		}
	}()
	wk := newWorker(t, pki, ln.Addr().String(), "c1", "w1", echo)
	stop := startWorker(t, wk)
	eventually(t, "worker redials after the proxy went silent", func() bool { return accepted.Load() >= 2 })
	stop()
	_ = ln.Close()
	<-done
}

// silentProxy acknowledges one hello and then reads the control stream
// without ever writing to it, until the worker hangs up.
func silentProxy(c net.Conn) {
	sess, err := yamux.Client(c, yamuxConfig(testTiming().withDefaults(), logger(nil)))
	if err != nil {
		return
	}
	defer sess.Close()
	st, err := sess.OpenStream()
	if err != nil {
		return
	}
	if _, err := ReadFrame(st, 0); err != nil {
		return
	}
	ack, _ := NewMessage(TypeHelloAck, HelloAck{SessionID: "s"})
	b, _ := encodeMessage(ack)
	if WriteFrame(st, b) != nil {
		return
	}
	_, _ = io.Copy(io.Discard, st)
}
