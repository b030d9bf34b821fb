package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/limenhq/limen/gateway/tunnel"
)

// port is the proxy's one TLS port. ALPN decides what a connection is:
// limen-tunnel/1 is a worker's tunnel, h2 and http/1.1 reach every HTTP
// route, and a connection without ALPN (kubectl's WebSocket upgrades) is
// HTTP/1.1 limited to /k8s/ and /console/.
type port struct {
	// TLS carries the serving certificate and the client CAs; port adds the
	// tunnel's ALPN.
	TLS *tls.Config
	// Kube serves /k8s/. It is routed on the raw request target, before
	// Handler: a ServeMux would clean a non-canonical path (and redirect)
	// where Limen must refuse it.
	Kube http.Handler
	// Handler serves every other HTTP route.
	Handler http.Handler
	// Tunnel receives worker connections.
	Tunnel *tunnel.Server
	// WorkerCluster returns the cluster a verified worker certificate is
	// bound to, or an error when the chain is not a worker's.
	WorkerCluster func(chains [][]*x509.Certificate) (string, error)
	Logger        *slog.Logger
}

// handshakeTimeout bounds a client's TLS handshake.
const handshakeTimeout = 10 * time.Second

// Serve accepts connections on ln until ctx ends.
func (s *port) Serve(ctx context.Context, ln net.Listener) error {
	cfg := s.TLS.Clone()
	cfg.NextProtos = append([]string{tunnel.ALPN}, slices.DeleteFunc(slices.Clone(cfg.NextProtos), func(p string) bool { return p == tunnel.ALPN })...)
	httpConns := newConnListener(ln.Addr())
	srv := &http.Server{
		Handler: s.guard(s.Handler), TLSConfig: cfg, ReadHeaderTimeout: 30 * time.Second,
		ErrorLog: slog.NewLogLogger(s.Logger.Handler(), slog.LevelDebug),
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { _ = srv.Serve(httpConns) })
	stop := context.AfterFunc(ctx, func() {
		ln.Close()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	})
	defer stop()
	for {
		raw, err := ln.Accept()
		if err != nil {
			httpConns.Close()
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Go(func() { s.dispatch(ctx, tls.Server(raw, cfg), httpConns) })
	}
}

func (s *port) dispatch(ctx context.Context, conn *tls.Conn, httpConns *connListener) {
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

// guard routes /k8s/ on the raw target and limits connections that
// negotiated no ALPN to /k8s/ and /console/.
func (s *port) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.RequestURI, "/k8s/") {
			s.Kube.ServeHTTP(w, r)
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
