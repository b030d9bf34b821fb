package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/tunnel"
)

// proxyGateway is the proxy's request path: the worker tunnel, the audit
// store and the /k8s/ route.
type proxyGateway struct {
	Tunnel *tunnel.Server
	Audit  *audit.Store
	Kube   *proxy.Kube
}

// parseClusterLabels reads NAME:KEY=VALUE settings into labels per cluster.
func parseClusterLabels(specs []string) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for _, s := range specs {
		name, kv, ok := strings.Cut(s, ":")
		k, v, ok2 := strings.Cut(kv, "=")
		if !ok || !ok2 || name == "" || k == "" {
			return nil, fmt.Errorf("cluster-label %q: want NAME:KEY=VALUE, for example prod:env=production", s)
		}
		if out[name] == nil {
			out[name] = map[string]string{}
		}
		out[name][k] = v
	}
	return out, nil
}

// newProxyGateway opens the audit store and builds the /k8s/ handler.
func newProxyGateway(ctx context.Context, s *proxyServer, dataDir string, labels map[string]map[string]string) (*proxyGateway, error) {
	store, err := audit.Open(ctx, audit.Path(dataDir), audit.Options{Logger: s.Log})
	if err != nil {
		return nil, fmt.Errorf("audit store: %w", err)
	}
	g := &proxyGateway{Tunnel: &tunnel.Server{Logger: s.Log.With("component", "tunnel")}, Audit: store}
	g.Kube = &proxy.Kube{
		Authenticate: func(r *http.Request) (identity.Principal, time.Time, error) {
			p, err := s.CA.PrincipalFromRequest(r)
			if err != nil {
				return p, time.Time{}, err
			}
			return p, r.TLS.PeerCertificates[0].NotAfter, nil
		},
		Policy:   s.Policy,
		Tunnel:   g.Tunnel,
		Audit:    store,
		GrantKey: s.CA.GrantSigningKey(),
		Clusters: func(name string) policy.Cluster { return policy.Cluster{Name: name, Labels: labels[name]} },
		Logger:   s.Log.With("component", "kube"),
		Now:      time.Now,
	}
	s.Mux.Handle("/k8s/", g.Kube)
	return g, nil
}

// serve runs the one TLS port: tunnel, HTTP/2 and HTTP/1.1 by ALPN.
func (g *proxyGateway) serve(ctx context.Context, s *proxyServer, ln net.Listener) error {
	srv := &proxy.Server{TLS: s.TLS, Handler: s.Mux, Tunnel: g.Tunnel, WorkerCluster: s.CA.ClusterFromChains, Logger: s.Log}
	return srv.Serve(ctx, ln)
}

func (g *proxyGateway) close() {
	if g.Audit != nil {
		g.Audit.Close()
	}
}
