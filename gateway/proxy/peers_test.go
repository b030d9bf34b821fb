package proxy_test

import (
	"context"
	"encoding/pem"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/tunnel"
)

// peerSet is several proxies built by New that share a peer store, as
// proxies on one database do, and the CA and grant key: the later ones
// start from copies of the first one's key files (DataDir/ca), the way a
// mounted Secret would give them the same keys.
type peerSet struct {
	peers *tunnel.MemPeers
	first string // the first proxy's data directory, whose keys the others copy
}

// start builds and serves one proxy of the set at addr ("" picks a port),
// announcing addr to the workers.
func (s *peerSet) start(t *testing.T, dataDir, addr string) *running {
	t.Helper()
	if s.first == "" {
		s.first = dataDir
	} else if _, err := os.Stat(dataDir); os.IsNotExist(err) {
		copyDir(t, filepath.Join(s.first, "ca"), filepath.Join(dataDir, "ca"))
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// A port just given up by a stopped proxy may take a moment to bind.
		if ln, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p, err := proxy.New(ctx, proxy.Config{DataDir: dataDir, Clusters: []string{testCluster}, Logger: slog.New(slog.DiscardHandler),
		Peers: s.peers, PeerAddress: ln.Addr().String(), PeerHeartbeat: 50 * time.Millisecond, PeerTTL: 150 * time.Millisecond})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Serve(ctx, ln) }()
	stopped := false
	r := &running{Server: p, addr: ln.Addr().String(), stop: func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
			p.Close()
		}
	}}
	t.Cleanup(r.stop)
	return r
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEveryProxyReachesTheWorker: three proxies on one peer store and one
// worker enrolled with the first. A request through each proxy reaches the
// worker's cluster. When the third proxy dies, requests through the other
// two go on over the same tunnels; when it starts again at its address it
// has the worker's tunnel back within seconds and serves again.
func TestEveryProxyReachesTheWorker(t *testing.T) {
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"ConfigMapList","apiVersion":"v1","items":[]}`)
	}))
	t.Cleanup(api.Close)
	caFile := filepath.Join(t.TempDir(), "api-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	set := &peerSet{peers: &tunnel.MemPeers{TTL: 150 * time.Millisecond}}
	a := set.start(t, filepath.Join(dir, "a"), "")
	b := set.start(t, filepath.Join(dir, "b"), "")
	c := set.start(t, filepath.Join(dir, "c"), "")
	startWorker(t, a, api.URL, caFile)
	for _, p := range []*running{b, c} {
		waitUntil(t, "the worker's tunnel to "+p.addr, func() bool { return p.Tunnel.Connected(testCluster) })
	}
	admin := identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "root", Traits: map[string][]string{"groups": {"admins"}}}
	get := func(p *running) (int, string) {
		t.Helper()
		hc := httpClient(p.tlsConfig(t, &admin, time.Hour), true)
		defer hc.CloseIdleConnections()
		resp, err := hc.Get("https://" + p.addr + "/k8s/" + testCluster + "/api/v1/namespaces/default/configmaps")
		if err != nil {
			t.Fatalf("through %s: %v", p.addr, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	check := func(p *running) {
		t.Helper()
		if code, body := get(p); code != http.StatusOK || !strings.Contains(body, "ConfigMapList") {
			t.Fatalf("through %s: %d %s", p.addr, code, body)
		}
	}
	for _, p := range []*running{a, b, c} {
		check(p)
	}
	sessions := func(p *running) string {
		var ids []string
		for _, w := range p.Tunnel.Workers() {
			ids = append(ids, w.SessionID)
		}
		return strings.Join(ids, ",")
	}
	sa, sb := sessions(a), sessions(b)

	cAddr, cDir := c.addr, filepath.Join(dir, "c")
	c.stop()
	for _, p := range []*running{a, b} {
		check(p)
	}
	time.Sleep(500 * time.Millisecond) // past c's TTL: a and b tell the worker c is gone
	if sessions(a) != sa || sessions(b) != sb {
		t.Fatalf("the worker's tunnels to a or b changed when c died: %s %s, then %s %s", sa, sb, sessions(a), sessions(b))
	}
	start := time.Now()
	c2 := set.start(t, cDir, cAddr)
	waitUntil(t, "the worker back at c", func() bool { return c2.Tunnel.Connected(testCluster) })
	took := time.Since(start)
	t.Logf("the restarted proxy had the worker's tunnel back after %s", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Fatalf("tunnel back after %s, want within 5s", took)
	}
	check(c2)
	if sessions(a) != sa || sessions(b) != sb {
		t.Fatal("the worker's tunnels to a or b changed when c came back")
	}
}
