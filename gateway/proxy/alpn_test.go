package proxy_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/proxy"
)

// TestNoALPNReachesOnlyKubeAndConsole: a connection that negotiated no ALPN
// (kubectl's WebSocket and SPDY dialers) reaches /k8s/ and /console/ and
// nothing else; every other route, spelled plainly or through a path that
// starts with an allowed prefix, gets the port's 404 that asks for ALPN,
// while the same request with ALPN http/1.1 reaches its route. Each
// request is written by hand, so no client cleans its path first.
func TestNoALPNReachesOnlyKubeAndConsole(t *testing.T) {
	r := startProxy(t, proxy.Config{})
	admin := identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "root", Traits: map[string][]string{"groups": {"admins"}}}
	const needsALPN = "this route needs ALPN"
	send := func(alpn, target string) (int, string) {
		t.Helper()
		c, err := tls.Dial("tcp", r.addr, r.tlsConfig(t, &admin, time.Hour, alpn))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got := c.ConnectionState().NegotiatedProtocol; got != alpn {
			t.Fatalf("negotiated %q, want %q", got, alpn)
		}
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", target); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("GET %s: %v", target, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, tt := range []struct {
		target string
		open   bool // reachable without ALPN
		// sneaks past the prefix check: the mux then cleans the path
		// (a redirect) or the console answers; no other route may.
		sneaks bool
	}{
		{"/k8s/" + testCluster + "/version", true, false},
		{"/console/", true, false},
		{proxy.PathHealth, false, false},
		{proxy.PathReady, false, false},
		{proxy.PathAccess, false, false},
		{"/v1/whoami", false, false},
		{"/", false, false},
		{"/k8s", false, false},
		{"/console", false, false},
		{"/console/../v1/whoami", false, true},
		{"/console/%2e%2e/v1/whoami", false, true},
		{"/k8s/../v1/whoami", false, true},
	} {
		code, body := send("", tt.target)
		refused := code == http.StatusNotFound && strings.Contains(body, needsALPN)
		switch {
		case tt.open && refused:
			t.Errorf("no ALPN, %s: %d %s; want it routed", tt.target, code, body)
		case tt.sneaks && code < 300:
			t.Errorf("no ALPN, %s: %d %s; a path through an allowed prefix reached another route", tt.target, code, body)
		case !tt.open && !tt.sneaks && !refused:
			t.Errorf("no ALPN, %s: %d %s; want the port's 404 that asks for ALPN", tt.target, code, body)
		}
		t.Logf("no ALPN, %s: %d", tt.target, code)
		if !tt.open && !tt.sneaks {
			// The route is there: with ALPN the same request reaches it.
			if code, body := send("http/1.1", tt.target); strings.Contains(body, needsALPN) {
				t.Errorf("http/1.1, %s: %d %s; the port refused a connection with ALPN", tt.target, code, body)
			}
		}
	}
}
