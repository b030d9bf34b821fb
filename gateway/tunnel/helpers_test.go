package tunnel

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"
)

// wait bounds every "eventually" in these tests: generous, since the point
// is only that nothing hangs.
const wait = 5 * time.Second

// testTiming makes liveness fast enough for tests.
func testTiming() Timing {
	return Timing{Heartbeat: 100 * time.Millisecond, PeerTimeout: time.Second, Handshake: 2 * time.Second}
}

type testPKI struct {
	pool   *x509.CertPool
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	server tls.Certificate
}

func newPKI(t testing.TB) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &testPKI{pool: x509.NewCertPool(), caCert: ca, caKey: key}
	p.pool.AddCert(ca)
	p.server = p.leaf(t, "proxy", "", x509.ExtKeyUsageServerAuth)
	return p
}

// leaf issues a certificate; a worker's cluster rides in the OU, standing in
// for the enrollment certificate's cluster binding.
func (p *testPKI) leaf(t testing.TB, cn, cluster string, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn, OrganizationalUnit: []string{cluster}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func (p *testPKI) workerTLS(t testing.TB, cluster string) *tls.Config {
	return &tls.Config{
		RootCAs:      p.pool,
		Certificates: []tls.Certificate{p.leaf(t, "worker", cluster, x509.ExtKeyUsageClientAuth)},
	}
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return nil
}

// testProxy is a stand-in for the proxy's TLS listener: it verifies the
// worker certificate, takes the cluster from it and calls ServeConn.
type testProxy struct {
	srv    *Server
	ln     net.Listener
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errs   chan error // ServeConn results

	mu    sync.Mutex
	conns []net.Conn
}

func startProxy(t testing.TB, pki *testPKI, srv *Server, addr string) *testProxy {
	t.Helper()
	cfg := &tls.Config{
		Certificates: []tls.Certificate{pki.server},
		ClientCAs:    pki.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		NextProtos:   []string{ALPN},
		MinVersion:   tls.VersionTLS13,
	}
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(wait); ; {
		// Rebinding a just-closed port can briefly fail; retry within the bound.
		if ln, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// As the proxy's port does: TLS over a GatherConn.
	ln = gatherListener{ln, cfg}
	p := &testProxy{srv: srv, ln: ln, cancel: cancel, errs: make(chan error, 100)}
	p.wg.Go(func() { p.accept(ctx) })
	t.Cleanup(p.stop)
	return p
}

// gatherListener accepts TLS connections over a GatherConn each.
type gatherListener struct {
	net.Listener
	cfg *tls.Config
}

func (l gatherListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(NewGatherConn(c), l.cfg), nil
}

func (p *testProxy) addr() string { return p.ln.Addr().String() }

func (p *testProxy) accept(ctx context.Context) {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		p.wg.Go(func() {
			conn := c.(*tls.Conn)
			if err := conn.HandshakeContext(ctx); err != nil {
				_ = conn.Close()
				return
			}
			cluster := conn.ConnectionState().PeerCertificates[0].Subject.OrganizationalUnit[0]
			select {
			case p.errs <- p.srv.ServeConn(ctx, conn, cluster):
			default:
			}
		})
	}
}

// killConns closes the raw connections under every session, as a crash or
// network cut would.
func (p *testProxy) killConns() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.(*tls.Conn).NetConn().Close()
	}
	p.conns = nil
}

// stop closes the listener and every session and waits for its goroutines.
func (p *testProxy) stop() {
	_ = p.ln.Close()
	p.cancel()
	p.killConns()
	p.wg.Wait()
}

// startWorker runs c in the background; the returned stop cancels it and
// waits for Run to return.
func startWorker(t testing.TB, c *Client) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("Run returned %v, want context.Canceled", err)
				}
			case <-time.After(wait):
				t.Errorf("Run did not return within %v of cancel", wait)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func newWorker(t testing.TB, pki *testPKI, addr, cluster, id string, h func(context.Context, net.Conn)) *Client {
	return &Client{
		Addr:       addr,
		TLSConfig:  pki.workerTLS(t, cluster),
		Hello:      Hello{Cluster: cluster, WorkerID: id, Version: "test"},
		Handler:    h,
		Logger:     testLogger(t),
		Timing:     testTiming(),
		MinBackoff: 20 * time.Millisecond,
		MaxBackoff: 200 * time.Millisecond,
	}
}

// eventually polls cond until it holds or wait passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", wait, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkGoroutines registers, first, a cleanup that runs last: once every
// other cleanup has stopped its workers and proxies, the goroutine count
// must fall back to where the test started.
func checkGoroutines(t *testing.T) {
	t.Helper()
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(wait)
		for runtime.NumGoroutine() > base {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				n := runtime.Stack(buf, true)
				t.Fatalf("goroutines: %d at start, %d after cleanup\n%s", base, runtime.NumGoroutine(), buf[:n])
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

func echo(_ context.Context, c net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
