package console

import (
	"context"
	"net/http"
	"strings"

	"github.com/limenhq/limen/gateway/identity"
)

// AccessFunc answers "what may I do" for p on cluster and namespace through
// client (DESIGN.md §7: allowed, refused by Kubernetes, out of scope). The
// computation is #13's (gateway/scope or gateway/access); the proxy wires
// it in Config.Access.
type AccessFunc func(ctx context.Context, p identity.Principal, cluster, namespace, client string) (AccessReport, error)

// The three answers of an AccessRule.
const (
	AnswerAllowed    = "allowed"
	AnswerRefusedK8s = "refused by Kubernetes"
	AnswerOutOfScope = "out of scope"
)

// AccessReport is the answer for one cluster, namespace and client.
type AccessReport struct {
	Cluster, Namespace, Client string
	// User and Groups are the Kubernetes identity the client gets: the
	// per-client name and groups policy gives it.
	User   string
	Groups []string
	Rules  []AccessRule
	// Incomplete is set when Kubernetes said its rule list is incomplete
	// (SelfSubjectRulesReview's incomplete), with its reason.
	Incomplete string
}

// AccessRule is one set of verbs on resources (or non-resource URLs) with
// its answer.
type AccessRule struct {
	Verbs           []string
	APIGroups       []string
	Resources       []string
	ResourceNames   []string
	NonResourceURLs []string
	// Answer is one of the Answer… values; Reason says why (the scope entry
	// that excludes it, Kubernetes' words).
	Answer, Reason string
}

type accessData struct {
	Cluster, Namespace, Client string
	Clusters                   []string
	Wired                      bool
	Report                     *AccessReport
	Err                        string
}

func (h *Handler) accessPage(w http.ResponseWriter, r *http.Request, s *signin) {
	q := r.URL.Query()
	d := accessData{Cluster: q.Get("cluster"), Namespace: q.Get("namespace"), Client: q.Get("client"), Wired: h.cfg.Access != nil}
	if d.Client == "" {
		d.Client = "kubectl"
	}
	if h.cfg.Clusters != nil {
		d.Clusters, _ = h.cfg.Clusters(r.Context(), s.p)
	}
	if d.Wired && d.Cluster != "" {
		// The answer is about the signed-in person through the client they
		// ask about, not through the console.
		p := s.p
		p.ClientID = strings.TrimSpace(d.Client)
		if p.ClientID == "kubectl" {
			p.ClientID = ""
		}
		rep, err := h.cfg.Access(r.Context(), p, d.Cluster, d.Namespace, d.Client)
		if err != nil {
			d.Err = err.Error()
		} else {
			d.Report = &rep
		}
	}
	h.render(w, r, http.StatusOK, "access", s, d)
}
