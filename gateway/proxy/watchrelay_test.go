package proxy_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestWatchRelayForwardsAsReverseProxy: a watch, relayed without
// ReverseProxy, reaches the worker as ReverseProxy would send it: the path
// below the cluster, the query as it is, no client identity, hop-by-hop
// header or header the client's Connection names, and TE only as
// "trailers". A query ReverseProxy would clean (a semicolon, a bad escape)
// goes through ReverseProxy, which drops the parts it cannot parse.
func TestWatchRelayForwardsAsReverseProxy(t *testing.T) {
	for _, tt := range []struct{ query, want string }{
		{"watch=1&resourceVersion=7", "watch=1&resourceVersion=7"},
		{"watch=1&x=a;b", "watch=1"},
		{"watch=1&bad=%zz", "watch=1"},
	} {
		t.Run(tt.query, func(t *testing.T) {
			f := newFront(t)
			code, body := f.get(t, "/k8s/demo/api/v1/namespaces/default/configmaps?"+tt.query, map[string]string{
				"Authorization": "Bearer stolen", "Impersonate-User": "admin", "X-Forwarded-Host": "evil", "Forwarded": "for=10.9.9.9",
				"Connection": "X-Hop", "X-Hop": "1", "Keep-Alive": "timeout=5", "Te": "trailers, deflate",
			})
			if code != http.StatusOK || body != "relayed!\n" {
				t.Fatalf("%d %q", code, body)
			}
			req := <-f.worker.got
			<-f.worker.grants
			<-f.worker.requests
			if req.URL.Path != "/api/v1/namespaces/default/configmaps" || req.URL.RawQuery != tt.want {
				t.Errorf("the worker got %s?%s, want the query %q", req.URL.Path, req.URL.RawQuery, tt.want)
			}
			for _, h := range []string{"Authorization", "Impersonate-User", "X-Forwarded-Host", "Forwarded", "X-Hop", "Keep-Alive"} {
				if v := req.Header.Get(h); v != "" {
					t.Errorf("the client's %s reached the worker: %q", h, v)
				}
			}
			if te := req.Header.Values("Te"); strings.Join(te, ",") != "trailers" {
				t.Errorf("TE %q at the worker, want trailers alone", te)
			}
		})
	}
}
