package tunnel

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// roundTrip opens a stream to cluster, sends msg, half-closes and reads the echo.
func roundTrip(t *testing.T, srv *Server, cluster, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c, err := srv.Open(ctx, cluster)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(wait))
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatalf("close write: %v", err)
	}
	got, err := io.ReadAll(c)
	if err != nil || string(got) != msg {
		t.Fatalf("echo = %q, %v; want %q", got, err, msg)
	}
}

// connectedPair starts a proxy whose OnConnect pushes a lock list and
// answers "audit.batch" requests, and one worker for c1 that answers "ping"
// requests; other control messages land on the returned channels.
func connectedPair(t *testing.T) (srv *Server, wk *Client, toWorker, fromWorker chan Message) {
	pki := newPKI(t)
	toWorker, fromWorker = make(chan Message, 10), make(chan Message, 10)
	srv = &Server{
		Logger: testLogger(t),
		Timing: testTiming(),
		OnConnect: func(ctx context.Context, w *Worker) error {
			m, _ := NewMessage("lock.list", []string{"mallory"})
			return w.Send(ctx, m)
		},
		OnMessage: func(ctx context.Context, w *Worker, m Message) {
			if m.Type == "audit.batch" {
				r, _ := m.Reply("audit.ack", map[string]string{"worker": w.Info().WorkerID})
				_ = w.Send(ctx, r)
				return
			}
			fromWorker <- m
		},
	}
	p := startProxy(t, pki, srv, "127.0.0.1:0")
	wk = newWorker(t, pki, p.addr(), "c1", "w1", echo)
	wk.OnMessage = func(ctx context.Context, m Message) {
		if m.Type == "ping" {
			r, _ := m.Reply("pong", nil)
			_ = wk.Send(ctx, r)
			return
		}
		toWorker <- m
	}
	startWorker(t, wk)
	eventually(t, "worker connected", func() bool { return srv.Connected("c1") && wk.Connected() })
	// OnConnect's push arrives before anything else.
	if m := recv(t, toWorker); m.Type != "lock.list" || string(m.Body) != `["mallory"]` {
		t.Fatalf("first message to worker = %+v", m)
	}
	return srv, wk, toWorker, fromWorker
}

func TestEndToEnd(t *testing.T) {
	checkGoroutines(t)
	srv, _, _, _ := connectedPair(t)
	const req = "GET /api HTTP/1.1\r\n\r\n"
	roundTrip(t, srv, "c1", req)
	eventually(t, "stream closed", func() bool { return srv.Stats().StreamsOpen == 0 })
	if st := srv.Stats(); st != (Stats{Workers: 1, StreamsOpened: 1, BytesIn: uint64(len(req)), BytesOut: uint64(len(req))}) {
		t.Fatalf("Stats() = %+v", st)
	}
	ws := srv.Workers()
	if len(ws) != 1 || ws[0].WorkerID != "w1" || ws[0].Cluster != "c1" || ws[0].Version != "test" ||
		!ws[0].Ready || ws[0].Opened != 1 || ws[0].SessionID == "" {
		t.Fatalf("Workers() = %+v", ws)
	}
}

func TestControlMessages(t *testing.T) {
	checkGoroutines(t)
	srv, wk, toWorker, fromWorker := connectedPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	session := srv.Workers()[0].SessionID

	// Proxy → worker: broadcast to one cluster, to all, and to one session.
	lock, _ := NewMessage("lock.set", map[string]string{"user": "bob"})
	if err := srv.Broadcast(ctx, "c1", lock); err != nil {
		t.Fatal(err)
	}
	if err := srv.Broadcast(ctx, "", Message{Type: "kill"}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Broadcast(ctx, "other", Message{Type: "nobody"}); err != nil {
		t.Fatal(err)
	}
	if err := srv.SendTo(ctx, session, Message{Type: "direct"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"lock.set", "kill", "direct"} {
		if m := recv(t, toWorker); m.Type != want {
			t.Fatalf("worker got %q, want %q", m.Type, want)
		}
	}
	if err := srv.SendTo(ctx, "nope", Message{Type: "x"}); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("SendTo unknown session: %v", err)
	}

	// Worker → proxy: plain send, and a request answered by the proxy.
	if err := wk.Send(ctx, Message{Type: "status"}); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, fromWorker); m.Type != "status" {
		t.Fatalf("proxy got %+v", m)
	}
	ack, err := wk.Request(ctx, Message{Type: "audit.batch", Body: json.RawMessage(`[1]`)})
	if err != nil || ack.Type != "audit.ack" || string(ack.Body) != `{"worker":"w1"}` {
		t.Fatalf("request = %+v, %v", ack, err)
	}
	// Proxy → worker request.
	w := srv.snapshot("c1")[0]
	if r, err := w.Request(ctx, Message{Type: "ping"}); err != nil || r.Type != "pong" {
		t.Fatalf("proxy request = %+v, %v", r, err)
	}
}

func recv(t *testing.T, ch <-chan Message) Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(wait):
		t.Fatal("no message within", wait)
		return Message{}
	}
}

func TestOpenNoWorker(t *testing.T) {
	var srv Server
	if _, err := srv.Open(context.Background(), "c1"); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("err = %v, want ErrNoWorker", err)
	}
	if srv.Connected("c1") || len(srv.Workers()) != 0 {
		t.Fatal("empty server reports workers")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := srv.Open(ctx, "c1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: err = %v", err)
	}
}

func TestClusterMismatchRefused(t *testing.T) {
	checkGoroutines(t)
	pki := newPKI(t)
	srv := &Server{Logger: testLogger(t), Timing: testTiming()}
	p := startProxy(t, pki, srv, "127.0.0.1:0")
	wk := newWorker(t, pki, p.addr(), "c1", "w1", echo)
	wk.Hello.Cluster = "c2" // the certificate says c1
	startWorker(t, wk)
	select {
	case err := <-p.errs:
		if !errors.Is(err, ErrRefused) {
			t.Fatalf("ServeConn = %v, want ErrRefused", err)
		}
	case <-time.After(wait):
		t.Fatal("ServeConn did not return")
	}
	if srv.Connected("c1") || srv.Connected("c2") || len(srv.Workers()) != 0 || wk.Connected() {
		t.Fatal("refused worker was registered")
	}
}

func TestSpreadAcrossWorkers(t *testing.T) {
	checkGoroutines(t)
	pki := newPKI(t)
	srv := &Server{Logger: testLogger(t), Timing: testTiming()}
	p := startProxy(t, pki, srv, "127.0.0.1:0")
	for _, id := range []string{"w1", "w2"} {
		startWorker(t, newWorker(t, pki, p.addr(), "c1", id, echo))
	}
	eventually(t, "two workers ready", func() bool {
		ws := srv.Workers()
		return len(ws) == 2 && ws[0].Ready && ws[1].Ready
	})
	var conns []net.Conn
	for range 10 {
		c, err := srv.Open(context.Background(), "c1")
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	ws := srv.Workers()
	if ws[0].Opened != 5 || ws[1].Opened != 5 {
		t.Fatalf("streams not spread evenly: %+v", ws)
	}
	for _, c := range conns {
		_ = c.Close()
	}
}

// TestDropMidStream cuts the TCP connection under a stream that both sides
// are blocked on: each side must see an error (not a clean EOF) promptly,
// the worker's handler context must end, the registry must forget the
// session, and the worker must come back.
func TestDropMidStream(t *testing.T) {
	checkGoroutines(t)
	pki := newPKI(t)
	srv := &Server{Logger: testLogger(t), Timing: testTiming()}
	p := startProxy(t, pki, srv, "127.0.0.1:0")

	handlerErr := make(chan error, 1)
	handlerCtxDone := make(chan struct{})
	inHandler := make(chan struct{})
	wk := newWorker(t, pki, p.addr(), "c1", "w1", func(ctx context.Context, c net.Conn) {
		close(inHandler)
		_, err := io.Copy(io.Discard, c) // blocks until the tunnel fails
		handlerErr <- err
		<-ctx.Done()
		close(handlerCtxDone)
	})
	startWorker(t, wk)
	eventually(t, "worker connected", func() bool { return srv.Connected("c1") })
	first := srv.Workers()[0].SessionID

	c, err := srv.Open(context.Background(), "c1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("start")); err != nil {
		t.Fatal(err)
	}
	<-inHandler
	readErr := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1)) // the worker never answers
		readErr <- err
	}()

	p.killConns()

	select {
	case err := <-readErr:
		if err == nil || errors.Is(err, io.EOF) || !errors.Is(err, ErrTunnelClosed) {
			t.Fatalf("proxy-side read err = %v, want ErrTunnelClosed", err)
		}
	case <-time.After(wait):
		t.Fatal("proxy-side read hangs after the tunnel dropped")
	}
	if _, err := c.Write([]byte("more")); !errors.Is(err, ErrTunnelClosed) {
		t.Fatalf("proxy-side write err = %v, want ErrTunnelClosed", err)
	}
	select {
	case err := <-handlerErr:
		if !errors.Is(err, ErrTunnelClosed) {
			t.Fatalf("worker-side read err = %v, want ErrTunnelClosed", err)
		}
	case <-time.After(wait):
		t.Fatal("worker-side read hangs after the tunnel dropped")
	}
	select {
	case <-handlerCtxDone:
	case <-time.After(wait):
		t.Fatal("handler context not cancelled after the tunnel dropped")
	}
	eventually(t, "worker back with a new session", func() bool {
		ws := srv.Workers()
		return len(ws) == 1 && ws[0].SessionID != first && ws[0].Ready
	})
}

func TestReconnectAfterProxyRestart(t *testing.T) {
	checkGoroutines(t)
	pki := newPKI(t)
	srv1 := &Server{Logger: testLogger(t), Timing: testTiming()}
	p1 := startProxy(t, pki, srv1, "127.0.0.1:0")
	addr := p1.addr()
	var mu sync.Mutex
	connects := 0
	wk := newWorker(t, pki, addr, "c1", "w1", echo)
	wk.OnConnect = func(context.Context, HelloAck) { mu.Lock(); connects++; mu.Unlock() }
	startWorker(t, wk)
	eventually(t, "worker connected", func() bool { return srv1.Connected("c1") })
	roundTrip(t, srv1, "c1", "before")

	p1.stop()
	eventually(t, "worker notices the proxy is gone", func() bool { return !wk.Connected() })
	if srv1.Connected("c1") || len(srv1.Workers()) != 0 {
		t.Fatalf("stopped proxy still lists %+v", srv1.Workers())
	}
	// Let the worker fail a few dials against the closed port.
	time.Sleep(100 * time.Millisecond)

	srv2 := &Server{Logger: testLogger(t), Timing: testTiming()}
	startProxy(t, pki, srv2, addr)
	eventually(t, "worker reconnected to the restarted proxy", func() bool { return srv2.Connected("c1") })
	roundTrip(t, srv2, "c1", "after")
	mu.Lock()
	defer mu.Unlock()
	if connects != 2 {
		t.Fatalf("OnConnect ran %d times, want 2", connects)
	}
}

func TestRunStopsHandlers(t *testing.T) {
	checkGoroutines(t)
	pki := newPKI(t)
	srv := &Server{Logger: testLogger(t), Timing: testTiming()}
	p := startProxy(t, pki, srv, "127.0.0.1:0")
	started := make(chan struct{})
	wk := newWorker(t, pki, p.addr(), "c1", "w1", func(ctx context.Context, c net.Conn) {
		close(started)
		<-ctx.Done() // a handler that only stops when told
	})
	stop := startWorker(t, wk)
	eventually(t, "worker connected", func() bool { return srv.Connected("c1") })
	c, err := srv.Open(context.Background(), "c1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("x"))
	<-started
	stop() // fails the test if Run does not return, handler included
	eventually(t, "registry drops the stopped worker", func() bool { return len(srv.Workers()) == 0 })
	if _, err := srv.Open(context.Background(), "c1"); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("open after worker stopped: %v", err)
	}
}

func TestClientConfigErrors(t *testing.T) {
	pki := newPKI(t)
	ok := func() *Client { return newWorker(t, pki, "127.0.0.1:1", "c1", "w1", echo) }
	for name, mutate := range map[string]func(*Client){
		"no addr":    func(c *Client) { c.Addr = "" },
		"no tls":     func(c *Client) { c.TLSConfig = nil },
		"no handler": func(c *Client) { c.Handler = nil },
		"no cluster": func(c *Client) { c.Hello.Cluster = "" },
		"no id":      func(c *Client) { c.Hello.WorkerID = "" },
	} {
		c := ok()
		mutate(c)
		if err := c.Run(context.Background()); err == nil || errors.Is(err, context.Canceled) {
			t.Errorf("%s: Run = %v, want a config error", name, err)
		}
	}
	if err := ok().Send(context.Background(), Message{Type: "x"}); !errors.Is(err, ErrNotConnected) {
		t.Errorf("Send while down: %v", err)
	}
}

// TestReconnectReplacesStaleSession: when a worker comes back while its old
// session is still registered (the proxy has not yet noticed it is dead),
// the old session is closed at once instead of lingering until the peer
// timeout and taking requests meanwhile.
func TestReconnectReplacesStaleSession(t *testing.T) {
	checkGoroutines(t)
	pki := newPKI(t)
	timing := testTiming()
	timing.PeerTimeout = time.Minute // only replacement can remove the first session
	srv := &Server{Logger: testLogger(t), Timing: timing}
	p := startProxy(t, pki, srv, "127.0.0.1:0")
	hello, _ := NewMessage(TypeHello, Hello{Cluster: "c1", WorkerID: "w"})

	old, st := rawWorker(t, pki, p.addr(), "c1")
	writeMsg(t, st, hello)
	eventually(t, "first session registered", func() bool { return srv.Connected("c1") })
	first := srv.Workers()[0].SessionID

	_, st2 := rawWorker(t, pki, p.addr(), "c1")
	writeMsg(t, st2, hello)
	eventually(t, "first session replaced", func() bool {
		ws := srv.Workers()
		return len(ws) == 1 && ws[0].SessionID != first
	})
	select {
	case <-old.CloseChan():
	case <-time.After(wait):
		t.Fatal("stale session not closed")
	}
}

// TestOnConnectErrorDropsWorker: if the connect hook cannot deliver the
// state a worker needs (the lock list), the worker is never offered to Open.
func TestOnConnectErrorDropsWorker(t *testing.T) {
	checkGoroutines(t)
	pki := newPKI(t)
	errPush := errors.New("lock store down")
	srv := &Server{
		Logger:    testLogger(t),
		Timing:    testTiming(),
		OnConnect: func(context.Context, *Worker) error { return errPush },
	}
	p := startProxy(t, pki, srv, "127.0.0.1:0")
	startWorker(t, newWorker(t, pki, p.addr(), "c1", "w1", echo))
	select {
	case err := <-p.errs:
		if !errors.Is(err, errPush) {
			t.Fatalf("ServeConn = %v, want the hook's error", err)
		}
	case <-time.After(wait):
		t.Fatal("ServeConn did not return")
	}
	if _, err := srv.Open(context.Background(), "c1"); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("open = %v, want ErrNoWorker", err)
	}
}

// TestRequestAllWaitsForEachAnswer: a push returns once every worker
// answered; a worker whose answer is refused is dropped, to get the whole
// state again when it reconnects.
func TestRequestAllWaitsForEachAnswer(t *testing.T) {
	checkGoroutines(t)
	srv, _, _, _ := connectedPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var got []string
	if err := srv.RequestAll(ctx, "c1", Message{Type: "ping"}, func(m Message) error {
		got = append(got, m.Type)
		return nil
	}); err != nil || len(got) != 1 || got[0] != "pong" {
		t.Fatalf("RequestAll: answers %v, err %v; want one pong", got, err)
	}
	if err := srv.RequestAll(ctx, "other", Message{Type: "ping"}, func(Message) error { return errors.New("no worker, no call") }); err != nil {
		t.Fatalf("RequestAll to a cluster without workers: %v", err)
	}
	refused := errors.New("not the ack we want")
	if err := srv.RequestAll(ctx, "c1", Message{Type: "ping"}, func(Message) error { return refused }); !errors.Is(err, refused) {
		t.Fatalf("RequestAll with a refused answer: %v", err)
	}
	for deadline := time.Now().Add(wait); srv.Connected("c1"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a worker whose answer was refused is still connected")
		}
	}
}
