package proxy_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"

	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/limenhq/limen/gateway/proxy"
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
