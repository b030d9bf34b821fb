package haproxy_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limenhq/limen/test/haproxy"
)

// backend is a TLS server that answers /readyz by its ready flag and every
// other path with the server name its client sent.
type backend struct {
	srv   *httptest.Server
	ready atomic.Bool
}

func newBackend(t *testing.T) *backend {
	b := &backend{}
	b.ready.Store(true)
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			if r.TLS.NegotiatedProtocol != "http/1.1" {
				http.Error(w, "want ALPN http/1.1", http.StatusNotFound)
				return
			}
			if !b.ready.Load() {
				http.Error(w, "not ready", http.StatusServiceUnavailable)
				return
			}
			_, _ = io.WriteString(w, "ready\n")
			return
		}
		_, _ = io.WriteString(w, r.TLS.ServerName)
	}))
	b.srv.StartTLS()
	t.Cleanup(b.srv.Close)
	return b
}

func TestPassesTLSThroughAndFollowsReadiness(t *testing.T) {
	a, b := newBackend(t), newBackend(t)
	lb := haproxy.Start(t, []haproxy.Backend{
		{Name: "a", Addr: strings.TrimPrefix(a.srv.URL, "https://")},
		{Name: "b", Addr: strings.TrimPrefix(b.srv.URL, "https://")},
	})
	ctx := context.Background()
	for _, n := range []string{"a", "b"} {
		if err := lb.WaitStatus(ctx, n, "UP", 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// The backend's own certificate reaches the client, and the client's
	// server name reaches the backend: the balancer terminates nothing.
	tr := a.srv.Client().Transport.(*http.Transport).Clone()
	tr.TLSClientConfig.ServerName = "example.com"
	tr.TLSClientConfig.InsecureSkipVerify = false
	tr.TLSClientConfig.RootCAs.AddCert(b.srv.Certificate())
	tr.DisableKeepAlives = true
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	for range 4 {
		resp, err := hc.Get("https://" + lb.Addr + "/name")
		if err != nil {
			t.Fatalf("through haproxy: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "example.com" {
			t.Fatalf("the backend saw server name %q, want example.com", body)
		}
	}
	b.ready.Store(false)
	if err := lb.WaitStatus(ctx, "b", "DOWN", 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if st, _ := lb.Status(ctx, "a"); !strings.HasPrefix(st, "UP") {
		t.Fatalf("a is %s, want UP", st)
	}
	b.ready.Store(true)
	if err := lb.WaitStatus(ctx, "b", "UP", 3*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestRedispatchesAwayFromADeadBackend(t *testing.T) {
	a, b := newBackend(t), newBackend(t)
	lb := haproxy.Start(t, []haproxy.Backend{
		{Name: "a", Addr: strings.TrimPrefix(a.srv.URL, "https://")},
		{Name: "b", Addr: strings.TrimPrefix(b.srv.URL, "https://")},
	})
	b.srv.Close()
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	// Before the checks notice, every connection still gets through: the
	// one refused by b is retried on a.
	for i := range 10 {
		resp, err := hc.Get("https://" + lb.Addr + "/name")
		if err != nil {
			t.Fatalf("request %d through haproxy with b dead: %v", i, err)
		}
		resp.Body.Close()
	}
}
