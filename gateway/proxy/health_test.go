package proxy_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/tunnel"
)

// TestHealthForKubeletProbe asks /healthz the way the kubelet's HTTPS
// prober does (its transport: apimachinery's defaults, h2 offered, no
// certificate check, no client certificate) and gets 200 "ok" without
// authenticating.
func TestHealthForKubeletProbe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	p, err := proxy.New(ctx, proxy.Config{DataDir: filepath.Join(t.TempDir(), "proxy"), Clusters: []string{testCluster},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { _ = p.Serve(ctx, ln) })

	// k8s.io/kubernetes/pkg/probe/http.NewWithTLSConfig builds this transport.
	tr := utilnet.SetTransportDefaults(&http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true, Proxy: http.ProxyURL(nil),
	})
	hc := &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := hc.Get("https://" + ln.Addr().String() + proxy.PathHealth)
	if err != nil {
		t.Fatalf("GET %s: %v", proxy.PathHealth, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
		t.Fatalf("GET %s = %d %q over %s, want 200 \"ok\\n\"", proxy.PathHealth, resp.StatusCode, body, resp.Proto)
	}

	// Only GET: the endpoint changes nothing and answers nothing else.
	resp, err = hc.Post("https://"+ln.Addr().String()+proxy.PathHealth, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST %s = %d, want 405", proxy.PathHealth, resp.StatusCode)
	}
}

// downPeers is a peer store that cannot be reached.
type downPeers struct{}

func (downPeers) Heartbeat(context.Context, tunnel.Peer) error {
	return errors.New("store unreachable")
}
func (downPeers) Live(context.Context) ([]tunnel.Peer, error) {
	return nil, errors.New("store unreachable")
}

// TestReadiness: /readyz answers 200 once the proxy has recorded itself in
// its peer store, and 503 naming why while it cannot; /healthz (liveness)
// stays 200 either way.
func TestReadiness(t *testing.T) {
	for _, tt := range []struct {
		name   string
		peers  tunnel.Peers
		status int
		body   string
	}{
		{"alone", nil, http.StatusOK, "ready\n"},
		{"peer store down", downPeers{}, http.StatusServiceUnavailable, "store unreachable"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			t.Cleanup(func() { cancel(); wg.Wait() })
			p, err := proxy.New(ctx, proxy.Config{DataDir: filepath.Join(t.TempDir(), "proxy"), Clusters: []string{testCluster},
				Peers: tt.peers, PeerAddress: "127.0.0.1:1", PeerHeartbeat: 50 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			if failed := p.Ready(ctx); len(failed) == 0 {
				t.Fatal("ready before serving")
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() { _ = p.Serve(ctx, ln) })
			tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
			t.Cleanup(tr.CloseIdleConnections)
			hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
			get := func(path string) (int, string) {
				resp, err := hc.Get("https://" + ln.Addr().String() + path)
				if err != nil {
					t.Fatalf("GET %s: %v", path, err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			var code int
			var body string
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if code, body = get(proxy.PathReady); code == tt.status && strings.Contains(body, tt.body) {
					break
				}
			}
			if code != tt.status || !strings.Contains(body, tt.body) {
				t.Fatalf("GET %s = %d %q, want %d containing %q", proxy.PathReady, code, body, tt.status, tt.body)
			}
			if code, _ := get(proxy.PathHealth); code != http.StatusOK {
				t.Fatalf("GET %s = %d", proxy.PathHealth, code)
			}
		})
	}
}
