package proxy

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/limenhq/limen/gateway/proxyproto"
	"github.com/limenhq/limen/gateway/tunnel"
)

// port is the proxy's one TLS port. ALPN decides what a connection is:
// limen-tunnel/1 is a worker's tunnel, h2 and http/1.1 reach every HTTP
// route, and a connection without ALPN (kubectl's WebSocket upgrades) is
// HTTP/1.1 limited to /k8s/ and /console/.
//
// The port's limits (Limits) bound what a client gets before and without
// authenticating: connections per address, the time to finish the TLS
// handshake and to send a request head, idle connections, and read and
// write deadlines on every request that is not a stream.
type port struct {
	// TLS carries the serving certificate and the client CAs; port adds the
	// tunnel's ALPN.
	TLS *tls.Config
	// Kube serves /k8s/. It is routed on the raw request target, before
	// Handler: a ServeMux would clean a non-canonical path (and redirect)
	// where Limen must refuse it.
	Kube http.Handler
	// ServerCluster tells whether a request's TLS server name names a
	// cluster (Kube.ServerCluster); such a connection is routed to Kube
	// on every path. Nil: routing by path only.
	ServerCluster func(r *http.Request) (string, bool)
	// Handler serves every other HTTP route.
	Handler http.Handler
	// Tunnel receives worker connections.
	Tunnel *tunnel.Server
	// WorkerCluster returns the cluster a verified worker certificate is
	// bound to, or an error when the chain is not a worker's.
	WorkerCluster func(chains [][]*x509.Certificate) (string, error)
	// Limits are the port's limits; zero fields take DefaultLimits'.
	Limits Limits
	// ShutdownTimeout bounds the drain once Serve's context ends (drain);
	// 0 is DefaultShutdownTimeout. EndSessions, if set, ends the proxy's
	// live streams when the drain starts.
	ShutdownTimeout time.Duration
	EndSessions     func()
	Logger          *slog.Logger
}

// DefaultShutdownTimeout bounds the proxy's drain. The Helm chart gives the
// pod 5 s more than this before the kubelet kills it.
const DefaultShutdownTimeout = 25 * time.Second

// Limits bound the proxy's TLS port. Each is a key of `limen proxy`.
type Limits struct {
	// HandshakeTimeout bounds a TLS handshake, the time a client has to
	// authenticate (or to present no certificate); worker tunnels too
	// (tls-handshake-timeout).
	HandshakeTimeout time.Duration
	// ReadHeaderTimeout bounds sending a request's head (read-header-timeout).
	ReadHeaderTimeout time.Duration
	// ReadTimeout and WriteTimeout bound reading a request and writing its
	// response, except for /k8s/ streams (watch, exec, attach, logs -f,
	// port-forward, proxy), which last as long as their grant and which
	// lock, kill and expiry end (read-timeout, write-timeout).
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	// IdleTimeout closes a connection with no request in flight
	// (idle-timeout).
	IdleTimeout time.Duration
	// MaxConnsPerIP caps the open connections from one client address,
	// worker tunnels included; more are closed as they are accepted
	// (max-conns-per-ip).
	MaxConnsPerIP int
	// ProxyProtocolFrom are the TCP load balancers in front of the proxy
	// that send a PROXY protocol v2 header (proxy-protocol-from): a
	// connection from one must start with a valid header, whose source is
	// then the client's address (audit, MaxConnsPerIP); one from anywhere
	// else is read as TLS. Empty: no header is read.
	ProxyProtocolFrom proxyproto.Trusted
	// DeniedInterval is how often the refusals of unauthenticated clients
	// are stored: one auth.denied per client address and action per
	// interval, with a count (denied-audit-interval; audit.Aggregator).
	DeniedInterval time.Duration
}

// DefaultLimits are the port's limits unless configured.
func DefaultLimits() Limits {
	return Limits{
		HandshakeTimeout:  10 * time.Second,
		ReadHeaderTimeout: 10 * time.Second,
		// The API server gives a request that is not a stream 60 s; these
		// leave room for a slow client on top.
		ReadTimeout:    2 * time.Minute,
		WriteTimeout:   2 * time.Minute,
		IdleTimeout:    2 * time.Minute,
		MaxConnsPerIP:  256,
		DeniedInterval: time.Minute,
	}
}

// orDefault fills the zero fields of l from DefaultLimits.
func (l Limits) orDefault() Limits {
	d := DefaultLimits()
	l.HandshakeTimeout = cmp.Or(l.HandshakeTimeout, d.HandshakeTimeout)
	l.ReadHeaderTimeout = cmp.Or(l.ReadHeaderTimeout, d.ReadHeaderTimeout)
	l.ReadTimeout = cmp.Or(l.ReadTimeout, d.ReadTimeout)
	l.WriteTimeout = cmp.Or(l.WriteTimeout, d.WriteTimeout)
	l.IdleTimeout = cmp.Or(l.IdleTimeout, d.IdleTimeout)
	l.MaxConnsPerIP = cmp.Or(l.MaxConnsPerIP, d.MaxConnsPerIP)
	l.DeniedInterval = cmp.Or(l.DeniedInterval, d.DeniedInterval)
	return l
}

// Serve accepts connections on ln until ctx ends.
func (s *port) Serve(ctx context.Context, ln net.Listener) error {
	lim := s.Limits.orDefault()
	cfg := s.TLS.Clone()
	cfg.NextProtos = append([]string{tunnel.ALPN}, slices.DeleteFunc(slices.Clone(cfg.NextProtos), func(p string) bool { return p == tunnel.ALPN })...)
	httpConns := newConnListener(ln.Addr())
	srv := &http.Server{
		Handler: s.guard(s.Handler), TLSConfig: cfg,
		ReadHeaderTimeout: lim.ReadHeaderTimeout, ReadTimeout: lim.ReadTimeout,
		WriteTimeout: lim.WriteTimeout, IdleTimeout: lim.IdleTimeout,
		ErrorLog: slog.NewLogLogger(s.Logger.Handler(), slog.LevelDebug),
	}
	perIP := newIPLimiter(lim.MaxConnsPerIP)
	refused := &sampledLog{log: s.Logger, every: 10 * time.Second}
	var wg sync.WaitGroup
	defer wg.Wait()
	// Worker tunnels outlive ctx by the drain: the workers' session.end
	// events and recordings still come in on them. They close once Serve
	// returns, before the wait for their goroutines above (deferred
	// earlier, so run later): the other order waits forever for a worker
	// that is still connected.
	tunnels, closeTunnels := context.WithCancel(context.WithoutCancel(ctx))
	defer closeTunnels()
	wg.Go(func() { _ = srv.Serve(httpConns) })
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	// admit counts a connection against its client address and serves it
	// on its own goroutine, or closes it when that address has too many.
	admit := func(raw net.Conn) {
		conn, ok := perIP.admit(raw)
		if !ok {
			refused.note("connection refused: too many from one client address",
				"remote", raw.RemoteAddr().String(), "max_conns_per_ip", lim.MaxConnsPerIP)
			raw.Close()
			return
		}
		// TLS over a GatherConn: a tunnel writes each frame's records in one
		// system call; other connections write through it unchanged.
		wg.Go(func() {
			s.dispatch(tunnels, tls.Server(tunnel.NewGatherConn(conn), cfg), httpConns, lim.HandshakeTimeout)
		})
	}
	for {
		raw, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				s.drain(srv)
				return nil
			}
			httpConns.Close()
			return err
		}
		if lim.ProxyProtocolFrom.Trusts(raw.RemoteAddr()) {
			// The header is read off the accept loop, within the
			// handshake timeout: a slow balancer holds up only itself.
			wg.Go(func() {
				c, _, err := proxyproto.Accept(raw, lim.HandshakeTimeout)
				if err != nil {
					refused.note("connection refused: a load balancer named in proxy-protocol-from sent no valid PROXY protocol v2 header",
						"remote", raw.RemoteAddr().String(), "err", err)
					raw.Close()
					return
				}
				admit(c)
			})
			continue
		}
		admit(raw)
	}
}

// drain stops the port gracefully once Serve's context ended (SIGTERM),
// within ShutdownTimeout. The listener is closed already, so neither
// clients nor workers connect anew. Then:
//
//  1. the proxy's streams end with reason shutdown (EndSessions): each
//     kubectl sees its stream end, and each worker its tunnel stream;
//  2. requests under way finish (http.Server.Shutdown);
//  3. the workers' tunnels stay up until no stream is open on any: each
//     worker has had the session.end of every ended stream stored, and
//     has finished the recording uploads it had started.
//
// Serve then closes the tunnels; the workers reconnect to the next proxy,
// and recordings committed later go to it (the workers keep them).
func (s *port) drain(srv *http.Server) {
	start := time.Now()
	timeout := cmp.Or(s.ShutdownTimeout, DefaultShutdownTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s.Logger.Info("proxy stopping: ending sessions, finishing requests, collecting the workers' audit events", "shutdown_timeout", timeout)
	if s.EndSessions != nil {
		s.EndSessions()
	}
	shutErr := srv.Shutdown(ctx)
	if shutErr != nil {
		_ = srv.Close()
	}
	open := s.waitTunnelsIdle(ctx)
	log := s.Logger.With("took", time.Since(start).Round(time.Millisecond), "tunnel_streams_open", open)
	if shutErr != nil || open > 0 {
		log.Warn("proxy drain cut short by shutdown-timeout: requests or worker streams were still open; "+
			"workers deliver session events and recordings to the next proxy", "requests_err", shutErr)
		return
	}
	log.Info("proxy drained")
}

// waitTunnelsIdle waits until no worker has a data stream open, or ctx
// ends, and returns how many are open.
func (s *port) waitTunnelsIdle(ctx context.Context) int {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		open := 0
		for _, w := range s.Tunnel.Workers() {
			open += w.Streams
		}
		if open == 0 {
			return 0
		}
		select {
		case <-ctx.Done():
			return open
		case <-t.C:
		}
	}
}

func (s *port) dispatch(ctx context.Context, conn *tls.Conn, httpConns *connListener, handshakeTimeout time.Duration) {
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	err := conn.HandshakeContext(hctx)
	cancel()
	if err != nil {
		s.Logger.Debug("TLS handshake", "remote", conn.RemoteAddr().String(), "err", err)
		conn.Close()
		return
	}
	st := conn.ConnectionState()
	if st.NegotiatedProtocol != tunnel.ALPN {
		httpConns.push(conn)
		return
	}
	cluster, err := s.WorkerCluster(st.VerifiedChains)
	if err != nil {
		s.Logger.Warn("tunnel refused: not a worker certificate", "remote", conn.RemoteAddr().String(), "err", err)
		conn.Close()
		return
	}
	if err := s.Tunnel.ServeConn(ctx, conn, cluster); err != nil && ctx.Err() == nil {
		s.Logger.Info("worker tunnel ended", "cluster", cluster, "err", err)
	}
}

// guard routes /k8s/ on the raw target, and every request of a connection
// whose server name names a cluster, to Kube, and limits connections that
// negotiated no ALPN to /k8s/ and /console/.
func (s *port) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.RequestURI, "/k8s/") || s.namesCluster(r) {
			s.Kube.ServeHTTP(w, withDeadlines(w, r))
			return
		}
		if r.TLS != nil && r.TLS.NegotiatedProtocol == "" &&
			!strings.HasPrefix(r.URL.Path, "/k8s/") && !strings.HasPrefix(r.URL.Path, "/console/") {
			writeStatus(w, http.StatusNotFound, "this route needs ALPN h2 or http/1.1")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *port) namesCluster(r *http.Request) bool {
	if s.ServerCluster == nil {
		return false
	}
	_, ok := s.ServerCluster(r)
	return ok
}

type deadlinesKey struct{}

// withDeadlines lets the /k8s/ handler lift the port's read and write
// deadlines from a request it finds to be a stream (liftDeadlines).
func withDeadlines(w http.ResponseWriter, r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), deadlinesKey{}, http.NewResponseController(w)))
}

// liftDeadlines clears the port's read and write deadlines for r: on its
// connection for HTTP/1.1 (an upgraded exec or port-forward keeps the
// connection with no deadline), on its stream for HTTP/2. A stream (watch,
// exec, logs -f, port-forward) lasts as long as its grant; the session
// watchdog, not a deadline, ends it. Whether r is a stream is decided by
// sessions.Classify, as both hops decide it.
func liftDeadlines(r *http.Request) {
	rc, ok := r.Context().Value(deadlinesKey{}).(*http.ResponseController)
	if !ok {
		return
	}
	// ErrNotSupported only for a ResponseWriter that is not the server's,
	// which has no deadline to lift.
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
}

// ipLimiter counts the open connections of each client address.
type ipLimiter struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

func newIPLimiter(max int) *ipLimiter { return &ipLimiter{max: max, n: map[string]int{}} }

// admit counts c against its address, or refuses it when the address has
// max open already. The returned connection gives its place back when
// closed.
func (l *ipLimiter) admit(c net.Conn) (net.Conn, bool) {
	ip := c.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(ip); err == nil {
		ip = host
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[ip] >= l.max {
		return nil, false
	}
	l.n[ip]++
	return &countedConn{Conn: c, release: func() { l.release(ip) }}, true
}

func (l *ipLimiter) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[ip]--; l.n[ip] <= 0 {
		delete(l.n, ip)
	}
}

// countedConn releases its place in the ipLimiter once, on the first Close.
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite half-closes the TCP connection, as relay.CloseWrite asks of
// what a tls.Conn wraps.
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// sampledLog logs a repeated warning at most once per every, with how many
// times it happened since the last line: a flood of refused connections
// must not flood the log.
type sampledLog struct {
	log   *slog.Logger
	every time.Duration

	mu     sync.Mutex
	last   time.Time
	missed int
}

func (l *sampledLog) note(msg string, args ...any) {
	l.mu.Lock()
	now := time.Now()
	if now.Sub(l.last) < l.every {
		l.missed++
		l.mu.Unlock()
		return
	}
	missed := l.missed
	l.last, l.missed = now, 0
	l.mu.Unlock()
	l.log.Warn(msg, append(args, "also_since_last_log", missed)...)
}

// connListener hands already-handshaken connections to an http.Server.
type connListener struct {
	addr   net.Addr
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{addr: addr, conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *connListener) push(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.closed:
		c.Close()
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }
