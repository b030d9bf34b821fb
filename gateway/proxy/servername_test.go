package proxy_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/proxy"
)

// TestRoutingByServerName drives the assembled proxy and a real worker in
// front of a stand-in API server (named as such) that records the paths it
// is asked for. A connection whose TLS server name is CLUSTER.kube.PROXY is
// that cluster's API on every path, over h2, http/1.1 and with no ALPN
// (kubectl's upgrade connections); a /k8s/ path still routes, naming the
// same cluster or, without such a server name, any; a server name and a
// path naming two clusters are refused and audited, and nothing reaches the
// API server; and a path on the proxy's own name that no route serves gets
// a Status that says what to do, not a bare 404.
func TestRoutingByServerName(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.EscapedPath())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"path":"`+r.URL.EscapedPath()+`"}`)
	}))
	t.Cleanup(api.Close)
	caFile := filepath.Join(t.TempDir(), "api-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startProxy(t, proxy.Config{})
	startWorker(t, r, api.URL, caFile)
	admin := identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "root", Traits: map[string][]string{"groups": {"admins"}}}
	reached := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := seen
		seen = nil
		return out
	}

	type client struct {
		name string
		alpn []string // nil: none, as kubectl's SPDY and WebSocket dialers
	}
	clients := []client{{"h2", []string{"h2"}}, {"http/1.1", []string{"http/1.1"}}, {"no ALPN", nil}}
	tests := []struct {
		serverName, path string
		code             int
		upstream         string // the path the API server must see; "" none
		msg              string // in the refusal's Status message
	}{
		{testCluster + ".kube.127.0.0.1", "/version", 200, "/version", ""},
		{testCluster + ".kube.localhost", "/api/v1/namespaces/default/configmaps", 200, "/api/v1/namespaces/default/configmaps", ""},
		{testCluster + ".kube.127.0.0.1", "/k8s/" + testCluster + "/version", 200, "/version", ""},
		// A kubeconfig written before routing by server name.
		{"127.0.0.1", "/k8s/" + testCluster + "/version", 200, "/version", ""},
		{testCluster + ".kube.127.0.0.1", "/k8s/other/version", 400, "", `names cluster "demo" and the path names cluster "other"`},
		{"other.kube.127.0.0.1", "/k8s/" + testCluster + "/version", 400, "", `names cluster "other" and the path names cluster "demo"`},
		{testCluster + ".kube.127.0.0.1", "/api/%2e%2e/secrets", 400, "", "not canonical"},
		{"127.0.0.1", "/version", 404, "", "limen kube login"},
	}
	for _, c := range clients {
		for _, tt := range tests {
			if c.alpn == nil && tt.code == 404 {
				continue // a connection without ALPN reaches only /k8s/ and /console/ (TestNoALPNReachesOnlyKubeAndConsole)
			}
			cfg := r.tlsConfig(t, &admin, time.Hour, c.alpn...)
			cfg.ServerName = tt.serverName // verified: the serving certificate must cover it
			resp, body := get(t, cfg, c.alpn, "https://"+r.addr+tt.path)
			up := reached()
			if resp.StatusCode != tt.code {
				t.Errorf("%s, server name %s, %s: %s %s; want %d", c.name, tt.serverName, tt.path, resp.Status, body, tt.code)
				continue
			}
			if tt.upstream != "" {
				if len(up) != 1 || up[0] != tt.upstream {
					t.Errorf("%s, server name %s, %s: the API server saw %q, want %q", c.name, tt.serverName, tt.path, up, tt.upstream)
				}
				continue
			}
			if len(up) != 0 {
				t.Errorf("%s, server name %s, %s: refused, yet the API server saw %q", c.name, tt.serverName, tt.path, up)
			}
			var st metav1.Status
			if err := json.Unmarshal(body, &st); err != nil || st.Kind != "Status" || int(st.Code) != tt.code || !strings.Contains(st.Message, tt.msg) {
				t.Errorf("%s, server name %s, %s: body %s (%v); want a Status %d saying %q", c.name, tt.serverName, tt.path, body, err, tt.code, tt.msg)
			}
		}
	}
	evs, err := r.Audit.Search(context.Background(), audit.Query{Type: audit.TypeAuthDenied})
	if err != nil {
		t.Fatal(err)
	}
	mismatches := 0
	for _, ev := range evs {
		if ev.Denied != nil && strings.HasPrefix(ev.Denied.Reason, "cluster mismatch") {
			mismatches++
			if ev.Principal.Name != "root" {
				t.Errorf("the mismatch refusal names %q, want the certificate's root", ev.Principal)
			}
		}
	}
	if want := 2 * len(clients); mismatches != want {
		t.Errorf("%d auth.denied events for a cluster mismatch, want %d", mismatches, want)
	}
}

// TestServingCertificateCoversClusterNames: the generated certificate
// verifies for CLUSTER.kube.NAME under each of the proxy's names, and for
// no deeper name (a cluster name is one DNS label).
func TestServingCertificateCoversClusterNames(t *testing.T) {
	r := startProxy(t, proxy.Config{})
	leaf := r.CA.ServingCertificate().Leaf
	for _, ok := range []string{"demo.kube.localhost", "prod-1.kube.127.0.0.1", "localhost"} {
		if err := leaf.VerifyHostname(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"a.b.kube.localhost", "kube.localhost", "demo.kube.example.com"} {
		if leaf.VerifyHostname(bad) == nil {
			t.Errorf("the serving certificate covers %s", bad)
		}
	}
}

// get sends one GET with cfg and returns the response and its body.
func get(t *testing.T, cfg *tls.Config, alpn []string, url string) (*http.Response, []byte) {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: len(alpn) > 0 && alpn[0] == "h2"}
	if !tr.ForceAttemptHTTP2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	cfg.NextProtos = alpn
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s (server name %s): %v", url, cfg.ServerName, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}
