package worker_test

import (
	"net/http"
	"testing"
)

// TestProxyTraceReachesAPIServerWithoutTracer: a worker without a tracer
// makes no span of its own, but the proxy's traceparent still reaches the
// API server, so that the API server's spans join the proxy's trace; with
// none from the proxy, the API server gets none.
func TestProxyTraceReachesAPIServerWithoutTracer(t *testing.T) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct{ sent, want string }{{parent, parent}, {"", ""}} {
		b := newBench(t)
		b.h.Tracer = nil
		b.traceParent = tc.sent
		tok, _ := b.grant(nil)
		if _, resp, body := b.serve(tok, get(listPath)); resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		seen := b.seen()
		if len(seen) != 1 {
			t.Fatalf("the API server saw %d requests, want 1", len(seen))
		}
		if got := seen[0].header.Get("Traceparent"); got != tc.want {
			t.Errorf("proxy's traceparent %q: the API server got %q, want %q", tc.sent, got, tc.want)
		}
	}
}
