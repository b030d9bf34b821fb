package tunnel

import (
	"context"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// peerProxy is one of several proxies sharing a Peers store: a tunnel
// Server behind a testProxy listener, announcing itself.
type peerProxy struct {
	*testProxy
	ann  *Announcer
	stop func()
}

const testPeerBeat = 50 * time.Millisecond

func startPeerProxy(t testing.TB, pki *testPKI, peers Peers, id, addr string) *peerProxy {
	t.Helper()
	srv := &Server{ID: id, Timing: testTiming(), Logger: testLogger(t)}
	ann := &Announcer{Peers: peers, Server: srv, Interval: testPeerBeat, Logger: testLogger(t)}
	srv.OnConnect = func(ctx context.Context, w *Worker) error { return ann.OnConnect(ctx, w) }
	tp := startProxy(t, pki, srv, addr)
	ann.Self = Peer{ID: id, Addr: tp.addr()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ann.Run(ctx) }()
	p := &peerProxy{testProxy: tp, ann: ann}
	var once sync.Once
	p.stop = func() { once.Do(func() { cancel(); <-done; tp.stop() }) }
	t.Cleanup(p.stop)
	return p
}

// testLB is a stand-in TCP load balancer (the e2e runs HAProxy): each
// connection goes to the next backend in turn, bytes untouched.
type testLB struct {
	ln       net.Listener
	backends []string
	next     atomic.Uint64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func startLB(t testing.TB, backends ...string) *testLB {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lb := &testLB{ln: ln, backends: backends}
	lb.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b := lb.backends[(lb.next.Add(1)-1)%uint64(len(lb.backends))]
			u, err := net.Dial("tcp", b)
			if err != nil {
				_ = c.Close()
				continue
			}
			lb.mu.Lock()
			lb.conns = append(lb.conns, c, u)
			lb.mu.Unlock()
			lb.wg.Go(func() { _, _ = io.Copy(u, c); _ = u.Close() })
			lb.wg.Go(func() { _, _ = io.Copy(c, u); _ = c.Close() })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		lb.mu.Lock()
		for _, c := range lb.conns {
			_ = c.Close()
		}
		lb.mu.Unlock()
		lb.wg.Wait()
	})
	return lb
}

func newPool(t testing.TB, pki *testPKI, addr string, h func(context.Context, net.Conn)) *Pool {
	return &Pool{
		Addr:       addr,
		TLSConfig:  pki.workerTLS(t, "c1"),
		Hello:      Hello{Cluster: "c1", WorkerID: "w1", Version: "test"},
		Handler:    h,
		Logger:     testLogger(t),
		Timing:     testTiming(),
		MinBackoff: 20 * time.Millisecond,
		MaxBackoff: 200 * time.Millisecond,
		JoinSpread: 100 * time.Millisecond,
	}
}

func startPool(t testing.TB, p *Pool) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(wait):
			t.Errorf("Pool.Run did not return within %v", wait)
		}
	})
}

// echoThrough opens a stream to cluster c1 on srv and checks the echo.
func echoThrough(t testing.TB, srv *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c, err := srv.Open(ctx, "c1")
	if err != nil {
		t.Fatalf("open through %s: %v", srv.ID, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("through %s: %q, %v", srv.ID, buf, err)
	}
}

func sessionIDs(srv *Server) []string {
	var out []string
	for _, w := range srv.Workers() {
		out = append(out, w.SessionID)
	}
	slices.Sort(out)
	return out
}

// TestPoolReachesEveryProxy: a worker given only the load balancer's
// address ends up with a tunnel to each of three proxies, so a request
// through any of them reaches its cluster. The proxy the load balancer
// chose holds two sessions of the worker (through the balancer, and
// direct), and neither replaces the other.
func TestPoolReachesEveryProxy(t *testing.T) {
	checkGoroutines(t)
	pki := newPKI(t)
	peers := &MemPeers{TTL: 3 * testPeerBeat}
	var ps []*peerProxy
	for _, id := range []string{"a", "b", "c"} {
		ps = append(ps, startPeerProxy(t, pki, peers, id, "127.0.0.1:0"))
	}
	lb := startLB(t, ps[0].addr()) // the balancer lands on a
	pool := newPool(t, pki, lb.ln.Addr().String(), echo)
	startPool(t, pool)
	for _, p := range ps {
		eventually(t, "a tunnel to "+p.srv.ID, func() bool { return p.srv.Connected("c1") })
		echoThrough(t, p.srv)
	}
	eventually(t, "four tunnels up", func() bool { return len(pool.ConnectedAddrs()) == 4 })
	eventually(t, "both of the worker's sessions at a", func() bool { return len(ps[0].srv.Workers()) == 2 })
	links := map[string]bool{}
	for _, w := range ps[0].srv.Workers() {
		links[w.Link] = true
	}
	if !links[lb.ln.Addr().String()] || !links[ps[0].addr()] {
		t.Fatalf("links at a: %v", links)
	}
	before := sessionIDs(ps[0].srv)
	time.Sleep(10 * testPeerBeat)
	if after := sessionIDs(ps[0].srv); !slices.Equal(before, after) {
		t.Fatalf("sessions at a churned: %v then %v", before, after)
	}
	for _, p := range ps {
		echoThrough(t, p.srv)
	}
}

// TestPoolProxyRestart: a proxy dies; the worker's tunnels to the others
// stay up untouched and serve; its tunnel to the dead one stops once no
// proxy advertises it; when it starts again at the same address it has the
// worker's tunnel back within about a second.
func TestPoolProxyRestart(t *testing.T) {
	checkGoroutines(t)
	pki := newPKI(t)
	peers := &MemPeers{TTL: 3 * testPeerBeat}
	a := startPeerProxy(t, pki, peers, "a", "127.0.0.1:0")
	b := startPeerProxy(t, pki, peers, "b", "127.0.0.1:0")
	c := startPeerProxy(t, pki, peers, "c", "127.0.0.1:0")
	pool := newPool(t, pki, a.addr(), echo)
	startPool(t, pool)
	for _, p := range []*peerProxy{a, b, c} {
		eventually(t, "a tunnel to "+p.srv.ID, func() bool { return p.srv.Connected("c1") })
	}
	sa, sb := sessionIDs(a.srv), sessionIDs(b.srv)
	cAddr := c.addr()

	c.stop() // as kill -9: listener and connections gone, no more heartbeats
	eventually(t, "the tunnel to c stopped", func() bool { return !slices.Contains(pool.Addrs(), cAddr) })
	echoThrough(t, a.srv)
	echoThrough(t, b.srv)
	if !slices.Equal(sa, sessionIDs(a.srv)) || !slices.Equal(sb, sessionIDs(b.srv)) {
		t.Fatalf("sessions at a or b changed when c died: %v %v, then %v %v", sa, sb, sessionIDs(a.srv), sessionIDs(b.srv))
	}

	start := time.Now()
	c2 := startPeerProxy(t, pki, peers, "c", cAddr)
	eventually(t, "the worker back at c", func() bool { return c2.srv.Connected("c1") })
	took := time.Since(start)
	t.Logf("restarted proxy had the worker's tunnel back after %v", took.Round(time.Millisecond))
	// Bound: a heartbeat for a and b to see c, the join spread, a dial.
	if took > 2*time.Second {
		t.Fatalf("tunnel back after %v, want within 2s", took)
	}
	echoThrough(t, c2.srv)
	if !slices.Equal(sa, sessionIDs(a.srv)) || !slices.Equal(sb, sessionIDs(b.srv)) {
		t.Fatal("sessions at a or b changed when c came back")
	}
}

// TestPoolQuickRestart: a proxy back before its heartbeat expires is
// reconnected by the tunnel's own backoff.
func TestPoolQuickRestart(t *testing.T) {
	checkGoroutines(t)
	pki := newPKI(t)
	peers := &MemPeers{TTL: time.Hour} // c never leaves the list
	a := startPeerProxy(t, pki, peers, "a", "127.0.0.1:0")
	c := startPeerProxy(t, pki, peers, "c", "127.0.0.1:0")
	pool := newPool(t, pki, a.addr(), echo)
	startPool(t, pool)
	eventually(t, "a tunnel to c", func() bool { return c.srv.Connected("c1") })
	cAddr := c.addr()
	c.stop()
	c2 := startPeerProxy(t, pki, peers, "c", cAddr)
	eventually(t, "the worker back at c", func() bool { return c2.srv.Connected("c1") })
	echoThrough(t, c2.srv)
}

// TestPoolRepliesOnOrigin: a reply goes back on the tunnel its request
// came in on, whichever tunnel is the pool's first choice.
func TestPoolRepliesOnOrigin(t *testing.T) {
	checkGoroutines(t)
	pki := newPKI(t)
	peers := &MemPeers{TTL: 3 * testPeerBeat}
	a := startPeerProxy(t, pki, peers, "a", "127.0.0.1:0")
	b := startPeerProxy(t, pki, peers, "b", "127.0.0.1:0")
	pool := newPool(t, pki, a.addr(), echo)
	pool.OnMessage = func(ctx context.Context, m Message) {
		r, _ := m.Reply("pong", nil)
		go func() { _ = pool.Send(ctx, r) }()
	}
	startPool(t, pool)
	eventually(t, "a tunnel to b", func() bool { return b.srv.Connected("c1") })
	w := b.srv.snapshot("c1")[0]
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	r, err := w.Request(ctx, Message{Type: "ping"})
	if err != nil || r.Type != "pong" {
		t.Fatalf("b's request answered %+v, %v", r, err)
	}
	// Without a hook's context, the enrolled address's tunnel is chosen.
	if c, err := pool.pick(context.Background(), false); err != nil || c.Addr != a.addr() {
		t.Fatalf("pick = %v, %v", c, err)
	}
}

// TestPoolRefusesBadPeerList: a list that fails validation changes
// nothing: the worker keeps its tunnels and dials nothing new.
func TestPoolRefusesBadPeerList(t *testing.T) {
	checkGoroutines(t)
	pki := newPKI(t)
	srv := &Server{Timing: testTiming()}
	p := startProxy(t, pki, srv, "127.0.0.1:0")
	pool := newPool(t, pki, p.addr(), echo)
	var dialed atomic.Int32
	pool.dials = func(string, time.Duration) { dialed.Add(1) }
	startPool(t, pool)
	eventually(t, "connected", func() bool { return srv.Connected("c1") })
	bad := Message{Type: TypePeers, Body: []byte(`{"rev":9,"peers":[{"id":"x","addr":"evil:0"},{"id":"y","addr":"127.0.0.1:9"}]}`)}
	if err := srv.Broadcast(context.Background(), "", bad); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * testPeerBeat)
	if n := dialed.Load(); n != 1 || !slices.Equal(pool.Addrs(), []string{p.addr()}) {
		t.Fatalf("after a bad list: %d tunnels started, addresses %v", n, pool.Addrs())
	}
	echoThrough(t, srv)
}

// TestJoinSpread: a fleet told about a new proxy at once spreads its
// first dials over JoinSpread instead of dialing together, and a fleet
// that lost a proxy together retries spread over each backoff step.
func TestJoinSpread(t *testing.T) {
	const fleet = 2000
	p := &Pool{JoinSpread: time.Second}
	var buckets [10]int
	for range fleet {
		d := p.spread()
		if d < 0 || d >= time.Second {
			t.Fatalf("spread %v outside [0, 1s)", d)
		}
		buckets[d/(100*time.Millisecond)]++
	}
	for i, n := range buckets {
		// Uniform is 200 per bucket; a storm would pile them into one.
		if n < 120 || n > 280 {
			t.Fatalf("first dials: bucket %d has %d of %d: %v", i, n, fleet, buckets)
		}
	}
	// Retries after a failure: each fleet member's k-th delay falls in
	// [d/2, d], spread over that window, never all at its start.
	for attempt := range 5 {
		var lo, hi time.Duration = time.Hour, 0
		var sb [5]int
		for range fleet {
			b := backoff{min: 500 * time.Millisecond, max: 30 * time.Second, attempt: attempt}
			d := b.next()
			nominal := 500 * time.Millisecond << attempt
			if d < nominal/2 || d > nominal {
				t.Fatalf("attempt %d: %v outside [%v, %v]", attempt, d, nominal/2, nominal)
			}
			lo, hi = min(lo, d), max(hi, d)
			sb[min(int((d-nominal/2)*5/(nominal/2+1)), 4)]++
		}
		for i, n := range sb {
			if n < fleet/5*6/10 {
				t.Fatalf("attempt %d: retries pile up: fifth %d has %d of %d: %v", attempt, i, n, fleet, sb)
			}
		}
	}
}

// TestPoolDrainTellsEveryProxy: a stopping worker's drain reaches every
// proxy it has a tunnel to, each of which then sends new streams to the
// other worker of the cluster; the answer is the smallest count of others.
func TestPoolDrainTellsEveryProxy(t *testing.T) {
	checkGoroutines(t)
	pki := newPKI(t)
	peers := &MemPeers{TTL: time.Hour}
	a := startPeerProxy(t, pki, peers, "a", "127.0.0.1:0")
	b := startPeerProxy(t, pki, peers, "b", "127.0.0.1:0")
	stopping := newPool(t, pki, a.addr(), echo)
	startPool(t, stopping)
	eventually(t, "the stopping worker at both", func() bool { return len(stopping.ConnectedAddrs()) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if ack, err := stopping.Drain(ctx); err != nil || ack.Others != 0 {
		t.Fatalf("drain alone: %+v, %v; want 0 others", ack, err)
	}
	next := newPool(t, pki, b.addr(), echo)
	next.Hello.WorkerID = "w2"
	startPool(t, next)
	eventually(t, "the next worker at both", func() bool { return len(next.ConnectedAddrs()) == 2 })
	ack, err := stopping.Drain(ctx)
	if err != nil || ack.Others != 1 {
		t.Fatalf("drain with a replacement: %+v, %v; want 1 other", ack, err)
	}
	for _, p := range []*peerProxy{a, b} {
		for _, w := range p.srv.Workers() {
			if w.Draining != (w.WorkerID == "w1") {
				t.Fatalf("at %s: worker %s draining=%v", p.srv.ID, w.WorkerID, w.Draining)
			}
		}
		if w := p.srv.pick("c1", nil); w == nil || w.info.WorkerID != "w2" {
			t.Fatalf("at %s new streams go to %v, want w2", p.srv.ID, w)
		}
	}
}
