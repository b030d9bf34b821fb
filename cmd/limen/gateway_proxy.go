package main

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/proxy"
)

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

// newKube builds the /k8s/ route: authenticate, decide, grant, tunnel.
func newKube(s *proxyServer, labels map[string]map[string]string) *proxy.Kube {
	return &proxy.Kube{
		Authenticate: func(r *http.Request) (identity.Principal, time.Time, error) {
			p, err := s.CA.PrincipalFromRequest(r)
			if err != nil {
				return p, time.Time{}, err
			}
			return p, r.TLS.PeerCertificates[0].NotAfter, nil
		},
		Policy:   s.Policy,
		Tunnel:   s.Tunnel,
		Audit:    s.Audit,
		GrantKey: s.CA.GrantSigningKey(),
		Clusters: func(name string) policy.Cluster { return policy.Cluster{Name: name, Labels: labels[name]} },
		Logger:   s.Log.With("component", "kube"),
		Now:      time.Now,
	}
}
