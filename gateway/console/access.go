package console

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/limenhq/limen/gateway/access"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/kpath"
)

// AccessFunc answers "what may I do" for p — through the client p names —
// on cluster and namespace, with the three answers of gateway/access
// (allowed, refused by Kubernetes, out of scope). expires bounds the grant
// of the review it makes. The proxy wires proxy.Kube.Access.
type AccessFunc func(ctx context.Context, p identity.Principal, expires time.Time, cluster, namespace string) (access.Report, error)

type accessData struct {
	Cluster, Namespace, Client string
	Clusters                   []string
	Wired                      bool
	Verbs                      []string
	Report                     *access.Report
	Err                        string
}

func (h *Handler) accessPage(w http.ResponseWriter, r *http.Request, s *signin) {
	q := r.URL.Query()
	d := accessData{Cluster: q.Get("cluster"), Namespace: q.Get("namespace"), Client: strings.TrimSpace(q.Get("client")),
		Wired: h.cfg.Access != nil, Verbs: access.Verbs}
	if d.Client == "" {
		d.Client = "kubectl"
	}
	if h.cfg.Clusters != nil {
		d.Clusters, _ = h.cfg.Clusters(r.Context(), s.p)
	}
	if d.Cluster != "" {
		// The cluster is a name, never a path: it becomes part of the
		// review's request path at the proxy (which checks it again).
		if err := kpath.ValidCluster(d.Cluster); err != nil {
			d.Err = "cluster: " + err.Error()
			h.render(w, r, http.StatusBadRequest, "access", s, d)
			return
		}
	}
	if d.Wired && d.Cluster != "" {
		// The answer is about the signed-in person through the client they
		// ask about, not through the console.
		p := s.p
		p.ClientID = d.Client
		rep, err := h.cfg.Access(r.Context(), p, s.expires, d.Cluster, d.Namespace)
		if err != nil {
			d.Err = err.Error()
		} else {
			d.Report = &rep
		}
	}
	h.render(w, r, http.StatusOK, "access", s, d)
}
