package proxy_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/adminapi"
	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/internal/apihttp"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/worker"
)

// running is a proxy built by New, serving its TLS port on loopback.
type running struct {
	*proxy.Server
	addr string
	// stop ends Serve and waits for it.
	stop func()
}

// startProxy builds and serves a proxy with cfg (DataDir, Clusters and
// Logger are filled in).
func startProxy(t testing.TB, cfg proxy.Config) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if cfg.DataDir == "" {
		cfg.DataDir = filepath.Join(t.TempDir(), "proxy")
	}
	if cfg.Clusters == nil {
		cfg.Clusters = []string{testCluster}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p, err := proxy.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Serve(ctx, ln) }()
	var once sync.Once
	r := &running{Server: p, addr: ln.Addr().String(), stop: func() { once.Do(func() { cancel(); <-done }) }}
	t.Cleanup(func() { r.stop(); p.Close() })
	return r
}

// tlsConfig trusts the proxy's CA and presents a certificate for p, valid
// for ttl (none when p is nil), offering alpn.
func (r *running) tlsConfig(t testing.TB, p *identity.Principal, ttl time.Duration, alpn ...string) *tls.Config {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(r.CA.RootCert())
	cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: slices.DeleteFunc(alpn, func(s string) bool { return s == "" }),
		MinVersion: tls.VersionTLS13}
	if p != nil {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		cert, err := r.CA.IssueUser(key.Public(), *p, ttl)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key}}
	}
	return cfg
}

// httpClient speaks HTTP/2 (h2) or HTTP/1.1 to the proxy with cfg.
func httpClient(cfg *tls.Config, h2 bool) *http.Client {
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: h2}
	if !h2 {
		cfg.NextProtos = []string{"http/1.1"}
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	} else {
		cfg.NextProtos = []string{"h2"}
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// cutWithin reads from c until the proxy closes it, failing the test if it
// does not within d: a failure bound, not a measurement.
func cutWithin(t *testing.T, c net.Conn, d time.Duration, what string) {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the proxy still holds the connection after %s", what, d)
	}
	t.Logf("%s: cut after %s (%v)", what, time.Since(start).Round(time.Millisecond), err)
}

// TestPortCutsSlowHeader: a client that sends half a request head and then
// nothing (slowloris) is cut after read-header-timeout.
func TestPortCutsSlowHeader(t *testing.T) {
	r := startProxy(t, proxy.Config{Limits: proxy.Limits{ReadHeaderTimeout: 300 * time.Millisecond}})
	for _, alpn := range []string{"http/1.1", ""} {
		c, err := tls.Dial("tcp", r.addr, r.tlsConfig(t, nil, 0, alpn))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET /k8s/demo/api HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "); err != nil {
			t.Fatal(err)
		}
		cutWithin(t, c, 10*time.Second, fmt.Sprintf("half a head (ALPN %q)", alpn))
	}
}

// TestPortCutsStalledHandshake: a client that opens a connection and never
// finishes the TLS handshake — silent, or stopped inside its ClientHello —
// is cut after tls-handshake-timeout, before any authentication.
func TestPortCutsStalledHandshake(t *testing.T) {
	r := startProxy(t, proxy.Config{Limits: proxy.Limits{HandshakeTimeout: 300 * time.Millisecond}})
	for name, sent := range map[string][]byte{
		"silent":             nil,
		"half a ClientHello": {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03},
	} {
		c, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(sent); err != nil {
			t.Fatal(err)
		}
		cutWithin(t, c, 10*time.Second, name)
	}
}

// TestPortCapsConnectionsPerAddress: past max-conns-per-ip, a client
// address's connections are closed as they are accepted, while another
// address still gets in; a closed connection frees its place.
func TestPortCapsConnectionsPerAddress(t *testing.T) {
	r := startProxy(t, proxy.Config{Limits: proxy.Limits{MaxConnsPerIP: 2}})
	dial := func(from string) (*tls.Conn, error) {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
		c, err := tls.DialWithDialer(d, "tcp", r.addr, r.tlsConfig(t, nil, 0, "http/1.1"))
		if err != nil {
			return nil, err
		}
		// The handshake may complete before the server reads a byte on a
		// refused connection; a request shows whether it is served.
		if _, err := io.WriteString(c, "GET /v1/whoami HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			c.Close()
			return nil, err
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			c.Close()
			return nil, err
		}
		_ = c.SetReadDeadline(time.Time{})
		return c, nil
	}
	first, err := dial("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	second, err := dial("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if c, err := dial("127.0.0.1"); err == nil {
		c.Close()
		t.Fatal("a third connection from 127.0.0.1 was served; the cap is 2")
	}
	other, err := dial("127.0.0.2")
	if err != nil {
		t.Fatalf("127.0.0.2 refused while 127.0.0.1 is at its cap: %v", err)
	}
	defer other.Close()
	first.Close()
	waitUntil(t, "127.0.0.1 to get its place back", func() bool {
		c, err := dial("127.0.0.1")
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// TestPortUnauthenticatedFlood: 10,000 requests without a client
// certificate, to /k8s/ and to the admin API, are stored as a bounded
// number of auth.denied events whose counts add up to 10,000; meanwhile an
// admin's calls, whose own audit events must be stored before they answer,
// still succeed.
func TestPortUnauthenticatedFlood(t *testing.T) {
	r := startProxy(t, proxy.Config{Limits: proxy.Limits{DeniedInterval: time.Hour}})
	anon := httpClient(r.tlsConfig(t, nil, 0), true)
	admin := identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "root", Traits: map[string][]string{"groups": {"admins"}}}
	ac := adminapi.NewClient(&authapi.Client{Client: apihttp.Client{Proxy: r.addr, HTTP: httpClient(r.tlsConfig(t, &admin, time.Hour), true)}})

	const total, workers = 10000, 32
	paths := []string{"/k8s/demo/api/v1/namespaces", adminapi.PathLocks}
	var sent, bad atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				n := sent.Add(1)
				if n > total {
					return
				}
				resp, err := anon.Get("https://" + r.addr + paths[n%2])
				if err != nil {
					bad.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusUnauthorized {
					bad.Add(1)
				}
			}
		})
	}
	// The admin's calls run while the flood does.
	waitUntil(t, "the flood to start", func() bool { return sent.Load() > 500 })
	ctx := context.Background()
	alice := identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "alice"}
	legit := 0
	for sent.Load() < total && legit < 20 {
		if _, err := ac.Lock(ctx, adminapi.LockRequest{Target: locks.TargetOf(alice), Reason: "flood drill"}); err != nil {
			t.Fatalf("admin lock during the flood: %v", err)
		}
		if _, err := ac.Unlock(ctx, locks.TargetOf(alice)); err != nil {
			t.Fatalf("admin unlock during the flood: %v", err)
		}
		legit++
	}
	during := sent.Load() < total
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d flood requests were not answered 401", bad.Load())
	}
	if legit == 0 || !during {
		t.Logf("note: the flood ended before the admin's calls did (%d lock/unlock pairs)", legit)
	}
	t.Logf("%d admin lock/unlock pairs succeeded during the flood", legit)

	// Close stores what the aggregator still counts.
	r.stop()
	r.Denials.Close()
	evs, err := r.Audit.Search(ctx, audit.Query{Type: audit.TypeAuthDenied, Limit: total + 1})
	if err != nil {
		t.Fatal(err)
	}
	sum := map[string]int{}
	for _, ev := range evs {
		sum[ev.Denied.Action] += max(ev.Denied.Count, 1)
		if ev.Principal.Name != "" || ev.ClientAddr == "" {
			t.Errorf("flood refusal %+v", ev)
		}
	}
	t.Logf("%d auth.denied events stand for %v", len(evs), sum)
	if len(evs) > 4 || sum[audit.ActionKube] != total/2 || sum[audit.ActionAdmin] != total/2 {
		t.Fatalf("%d auth.denied events standing for %v; want at most 4 (two per address and action), for %d each",
			len(evs), sum, total/2)
	}
	locked, err := r.Audit.Search(ctx, audit.Query{Type: audit.TypeUserLock, User: "root"})
	if err != nil || len(locked) != legit {
		t.Fatalf("%d user.lock events stored for %d locks: %v", len(locked), legit, err)
	}
}

// startWorker enrolls a worker for testCluster with r and runs it in front
// of the API server at apiURL (CA in caFile), until the test ends.
func startWorker(t testing.TB, r *running, apiURL, caFile string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	tok, _, err := r.Tokens.Create(ctx, testCluster, 10*time.Minute, r.CA.Fingerprint(), identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	id, err := enroll.Enroll(ctx, enroll.Options{Proxy: r.addr, Cluster: testCluster, Token: tok.String(), DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("stand-in-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(ctx, worker.Config{Identity: id, DataDir: dir, APIServer: apiURL, CAFile: caFile, TokenFile: tokenFile,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	go func() { defer close(done); _ = w.Run(ctx); w.Close() }()
	waitUntil(t, "the worker to connect", func() bool { return r.Tunnel.Connected(testCluster) })
}

// TestPortDeadlinesSpareStreams: a watch through the port outlives the
// port's read and write deadlines, over HTTP/2 and HTTP/1.1, while a
// response that is not a stream and comes after them never reaches the
// client whole (HTTP/2 resets the stream at the deadline; HTTP/1.1 fails
// the late write). The API server is a stand-in (named as such) that
// answers a watch with one event, then a second once told to, and a list
// after three times the deadlines.
func TestPortDeadlinesSpareStreams(t *testing.T) {
	const timeout = 400 * time.Millisecond
	second := make(chan struct{})
	var once sync.Once
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") == "" {
			select {
			case <-r.Context().Done():
			case <-time.After(3 * timeout):
			}
			_, _ = io.WriteString(w, `{"kind":"ConfigMapList","items":[]}`)
			return
		}
		_, _ = io.WriteString(w, `{"type":"ADDED","object":{"metadata":{"name":"one"}}}`+"\n")
		w.(http.Flusher).Flush()
		select {
		case <-second:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, `{"type":"ADDED","object":{"metadata":{"name":"two"}}}`+"\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(api.Close)
	t.Cleanup(func() { once.Do(func() { close(second) }) })
	caFile := filepath.Join(t.TempDir(), "api-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startProxy(t, proxy.Config{Limits: proxy.Limits{ReadTimeout: timeout, WriteTimeout: timeout}})
	startWorker(t, r, api.URL, caFile)
	admin := identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "root", Traits: map[string][]string{"groups": {"admins"}}}
	base := "https://" + r.addr + "/k8s/" + testCluster + "/api/v1/namespaces/default/configmaps"

	for _, h2 := range []bool{true, false} {
		proto := map[bool]string{true: "HTTP/2", false: "HTTP/1.1"}[h2]
		c := httpClient(r.tlsConfig(t, &admin, time.Hour), h2)

		// Not a stream: the late answer does not get through.
		start := time.Now()
		resp, err := c.Get(base)
		if err == nil {
			body, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr == nil && resp.StatusCode == http.StatusOK {
				t.Fatalf("%s list: %s %s after %s; want it cut by the %s deadlines", proto, resp.Status, body,
					time.Since(start).Round(time.Millisecond), timeout)
			}
			err = fmt.Errorf("%s, body error %v", resp.Status, rerr)
		}
		t.Logf("%s list cut after %s: %v", proto, time.Since(start).Round(time.Millisecond), err)

		// A stream: both events arrive, the second well past the deadlines.
		start = time.Now()
		resp, err = c.Get(base + "?watch=1")
		if err != nil {
			t.Fatalf("%s watch: %v", proto, err)
		}
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != map[bool]int{true: 2, false: 1}[h2] {
			t.Fatalf("%s watch: %s over %s", proto, resp.Status, resp.Proto)
		}
		lines := make(chan string, 2)
		go func() {
			defer resp.Body.Close()
			buf := make([]byte, 4096)
			for {
				n, err := resp.Body.Read(buf)
				if n > 0 {
					lines <- string(buf[:n])
				}
				if err != nil {
					close(lines)
					return
				}
			}
		}()
		if l := <-lines; !strings.Contains(l, `"one"`) {
			t.Fatalf("%s watch: first event %q", proto, l)
		}
		// Let both deadlines pass well before the second event.
		time.Sleep(time.Until(start.Add(3 * timeout)))
		once.Do(func() { close(second) })
		select {
		case l, ok := <-lines:
			if !ok || !strings.Contains(l, `"two"`) {
				t.Fatalf("%s watch cut by a deadline: second event %q (open %v) after %s", proto, l, ok, time.Since(start))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s watch: no second event", proto)
		}
		t.Logf("%s watch still delivering after %s", proto, time.Since(start).Round(time.Millisecond))
		resp.Body.Close()
		second = make(chan struct{})
		once = sync.Once{}
	}
	// Both watches are sessions the worker reports ended; waiting for that
	// also spares the worker's shutdown a wait for a proxy that is gone.
	waitUntil(t, "the worker to report both watches ended", func() bool {
		evs, err := r.Audit.Search(context.Background(), audit.Query{Type: audit.TypeSessionEnd})
		return err == nil && len(evs) == 2
	})
}
