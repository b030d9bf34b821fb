package proxy

import (
	"context"
	"net/http"
	"strings"
	"time"
)

// PathHealth answers 200 without authentication once the proxy serves its
// port: the Helm chart's liveness probe (deploy/helm/limen). It tells
// nothing but "this process answers HTTP"; the kubelet's prober skips
// certificate verification and negotiates h2, so the ALPN rule of the port
// lets it through.
const PathHealth = "/healthz"

// PathReady answers 200 only while the proxy can serve: every readiness
// check passes (its heartbeat is in the peer store; the shared store adds
// its own). Otherwise 503 and the failing checks, one a line, so that a
// load balancer or the kubelet sends nobody to a proxy that would refuse
// them. Like PathHealth, it needs no authentication.
const PathReady = "/readyz"

// readyTimeout bounds the readiness checks of one probe.
const readyTimeout = 2 * time.Second

type readyCheck struct {
	name string
	fn   func(context.Context) error
}

// readyCheck adds a readiness condition; name is shown when it fails.
// Register checks while the proxy is built, before Serve.
func (s *Server) readyCheck(name string, fn func(context.Context) error) {
	s.ready = append(s.ready, readyCheck{name, fn})
}

// Ready runs the readiness checks and returns the failures, "name: error"
// each; none means the proxy can serve.
func (s *Server) Ready(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var failed []string
	for _, c := range s.ready {
		if err := c.fn(ctx); err != nil {
			failed = append(failed, c.name+": "+err.Error())
		}
	}
	return failed
}

func (s *Server) handleHealth() {
	// The path alone, the method checked here: the catch-all "/" route
	// (notRouted) would otherwise answer another method 404.
	s.Mux.HandleFunc(PathHealth, func(w http.ResponseWriter, r *http.Request) {
		if !probeMethod(w, r) {
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	s.Mux.HandleFunc(PathReady, func(w http.ResponseWriter, r *http.Request) {
		if !probeMethod(w, r) {
			return
		}
		if failed := s.Ready(r.Context()); len(failed) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready\n" + strings.Join(failed, "\n") + "\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
}

// probeMethod admits GET and HEAD and sets the probe headers, or answers 405.
func probeMethod(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return false
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	return true
}
