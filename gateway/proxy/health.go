package proxy

import "net/http"

// PathHealth answers 200 without authentication once the proxy serves its
// port: the Helm chart's liveness and readiness probes (deploy/helm/limen).
// It tells nothing but "this process answers HTTP"; the kubelet's prober
// skips certificate verification and negotiates h2, so the ALPN rule of the
// port lets it through.
const PathHealth = "/healthz"

func (s *Server) handleHealth() {
	// The path alone, the method checked here: the catch-all "/" route
	// (notRouted) would otherwise answer another method 404.
	s.Mux.HandleFunc(PathHealth, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte("ok\n"))
	})
}
