package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/worker"
	"github.com/limenhq/limen/test/cluster/clustertest"
)

// cutter is this test's named stand-in, for a fault the real API server
// cannot produce on demand: an HTTP front for the real API server that
// relays every request and response, except that an upgraded connection's
// server → client bytes stop after `after` bytes (most likely inside a
// frame) — with a clean end (TLS close_notify and FIN) or with a reset, as
// when the API server's kernel drops the tail of a stream it reset.
type cutter struct {
	api   *url.URL
	tls   *tls.Config
	after int64
	reset bool
	plain *httputil.ReverseProxy
	mu    sync.Mutex
	cuts  int
}

func newCutter(t *testing.T, after int64, reset bool) *cutter {
	t.Helper()
	c := clustertest.Cluster(t)
	api, err := url.Parse(c.Server)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(c.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}}
	cut := &cutter{api: api, tls: cfg, after: after, reset: reset}
	cut.plain = &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(api); pr.Out.Host = api.Host },
		Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: false},
	}
	return cut
}

func (c *cutter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") == "" {
		c.plain.ServeHTTP(w, r)
		return
	}
	up, err := tls.Dial("tcp", c.api.Host, c.tls)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer up.Close()
	out := r.Clone(r.Context())
	out.RequestURI, out.URL.Scheme, out.URL.Host, out.Host = "", "https", c.api.Host, c.api.Host
	if err := out.Write(up); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	br := bufio.NewReader(up)
	resp, err := http.ReadResponse(br, out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	resp.Body = nil
	_ = resp.Write(brw)
	_ = brw.Flush()
	go func() { _, _ = io.Copy(up, brw) }()
	_, _ = io.CopyN(conn, br, c.after)
	c.mu.Lock()
	c.cuts++
	c.mu.Unlock()
	if c.reset {
		tcp := conn.(*tls.Conn).NetConn().(*net.TCPConn)
		_ = tcp.SetLinger(0)
		_ = tcp.Close() // RST, without a close_notify first
		return
	}
	_ = conn.Close()
}

// TestStreamCutUpstreamFailsTheClient puts the cutter between the worker and
// the real API server: whether the API server's bytes end cleanly inside a
// frame or with a reset, before the exit status, the real kubectl (SPDY and
// WebSocket) must exit non-zero with Limen's message, never 0, and
// session.end must say how the stream ended.
func TestStreamCutUpstreamFailsTheClient(t *testing.T) {
	h := newHops(t)
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "cut", []string{"sleep", "infinity"}, false)
	spool, err := recording.OpenSpool(filepath.Join(t.TempDir(), "spool"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []audit.Event
	h.worker.Spool = spool
	h.worker.Events = func(_ context.Context, ev audit.Event) error {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
		return nil
	}
	kc := hopsKubeconfig(t, h)
	const size = 16 << 20
	for _, mode := range []struct {
		name   string
		reset  bool
		reason string
	}{{"eof", false, audit.EndTruncated}, {"reset", true, audit.EndUpstreamReset}} {
		t.Run(mode.name, func(t *testing.T) {
			cut := newCutter(t, 1<<20+12345, mode.reset)
			srv := httptest.NewTLSServer(cut)
			t.Cleanup(srv.Close)
			caFile := filepath.Join(t.TempDir(), "cutter-ca.pem")
			if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
				t.Fatal(err)
			}
			if h.worker.Upstream, h.worker.Transport, err = worker.Upstream(srv.URL, caFile); err != nil {
				t.Fatal(err)
			}
			if h.worker.Upgrades, err = worker.UpgradeTransport(caFile); err != nil {
				t.Fatal(err)
			}
			for _, cl := range execClients {
				t.Run(cl.transport, func(t *testing.T) {
					marker := "cut-" + mode.name + "-" + cl.transport
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					cmd := cl.command(t, ctx, kc, "-n", ns, "exec", "cut", "--", "sh", "-c", fmt.Sprintf("head -c %d /dev/zero", size), marker)
					var out countWriter
					var stderr bytes.Buffer
					cmd.Stdout, cmd.Stderr = &out, &stderr
					code := exitCode(t, cmd.Run(), ctx)
					t.Logf("kubectl exit %d after %d bytes: %s", code, out.n.Load(), strings.TrimSpace(stderr.String()))
					if code == 0 || !strings.Contains(stderr.String(), "Limen") {
						t.Fatalf("kubectl exited %d with stderr %q after a cut stream: want a non-zero exit and Limen's message", code, stderr.String())
					}
					if out.n.Load() >= size {
						t.Fatalf("kubectl got all %d bytes through a stream cut after %d", out.n.Load(), cut.after)
					}
					ev := waitEvent(t, &mu, &events, func(ev audit.Event) bool {
						return ev.Type == audit.TypeSessionEnd && slices.Contains(ev.Session.Command, marker)
					})
					if ev.Session.EndReason != mode.reason || ev.Session.ExitCode != nil {
						t.Fatalf("session.end %+v: want end_reason %q and no exit code", ev.Session, mode.reason)
					}
				})
			}
			cut.mu.Lock()
			defer cut.mu.Unlock()
			if cut.cuts != len(execClients) {
				t.Fatalf("the cutter cut %d streams, want %d", cut.cuts, len(execClients))
			}
		})
	}
}

// hopsKubeconfig is a kubeconfig for the in-process proxy of h.
func hopsKubeconfig(t *testing.T, h *hops) string {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: demo, cluster: {server: %q}}]\n"+
		"users: [{name: alice, user: {}}]\ncontexts: [{name: demo, context: {cluster: demo, user: alice}}]\ncurrent-context: demo\n",
		h.baseURL+"/k8s/demo")
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc
}

// waitEvent waits for an event that match accepts among those collected.
func waitEvent(t *testing.T, mu *sync.Mutex, events *[]audit.Event, match func(audit.Event) bool) audit.Event {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		for _, ev := range *events {
			if match(ev) {
				mu.Unlock()
				return ev
			}
		}
		mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("no matching audit event")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
