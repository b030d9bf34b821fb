package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limenhq/limen/gateway/access"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/kpath"
	"github.com/limenhq/limen/gateway/reqinfo"
)

// reviewKey marks a request the proxy makes itself for Access: it carries
// the principal it is made as. Only code in this process can set a context
// value, so no client can claim it.
type reviewKey struct{}

type reviewAs struct {
	p       identity.Principal
	expires time.Time
}

// authenticate is Authenticate, or the principal of the proxy's own
// access review.
func (k *Kube) authenticate(r *http.Request) (identity.Principal, time.Time, error) {
	if rv, ok := r.Context().Value(reviewKey{}).(reviewAs); ok {
		return rv.p, rv.expires, nil
	}
	return k.Authenticate(r)
}

// isReview reports whether r is the proxy's own SelfSubjectRulesReview,
// which the client's scope does not govern: it only asks Kubernetes what
// the client's identity may do.
func isReview(r *http.Request, info *reqinfo.Info) bool {
	_, ok := r.Context().Value(reviewKey{}).(reviewAs)
	return ok && r.Method == http.MethodPost && access.IsRulesReview(info)
}

// ErrAccess is a refusal of Access: the client or the principal may not
// ask (the message says why).
var ErrAccess = errors.New("access review refused")

// Access answers "what may I do" for p (its client included) on cluster in
// namespace: it asks the API server a SelfSubjectRulesReview as p's
// identity there — through the worker, with the groups and user name policy
// gives p's client, under a grant that carries only that review — and
// combines the rules with the client's scope (access.Compute). The console
// calls it with its own principals; GET /v1/access serves it to the CLI.
func (k *Kube) Access(ctx context.Context, p identity.Principal, expires time.Time, cluster, namespace string) (access.Report, error) {
	dec, err := k.Policy.Groups(ctx, p, k.Clusters(cluster))
	if err != nil {
		return access.Report{}, err
	}
	if dec.Scope == nil {
		return access.Report{}, fmt.Errorf("%w: policy does not register the client %q", ErrAccess, p.ClientID)
	}
	var rules authorizationv1.SubjectRulesReviewStatus
	if len(dec.Groups) > 0 {
		if rules, err = k.rulesReview(ctx, p, expires, cluster, namespace); err != nil {
			return access.Report{}, err
		}
	}
	rep := access.Compute(dec.Scope, namespace, rules, access.ResourcesFor(dec.Scope))
	rep.Cluster = cluster
	return rep, nil
}

// rulesReview posts the SelfSubjectRulesReview through the proxy's own
// request path, so that it is authorized, granted, tunnelled, impersonated
// and audited like any request of p's.
func (k *Kube) rulesReview(ctx context.Context, p identity.Principal, expires time.Time, cluster, namespace string) (authorizationv1.SubjectRulesReviewStatus, error) {
	var zero authorizationv1.SubjectRulesReviewStatus
	body, _ := json.Marshal(authorizationv1.SelfSubjectRulesReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectRulesReview"},
		Spec:     authorizationv1.SelfSubjectRulesReviewSpec{Namespace: namespace},
	})
	target := "/k8s/" + cluster + access.RulesReviewPath
	ctx = context.WithValue(ctx, reviewKey{}, reviewAs{p: p, expires: expires})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return zero, err
	}
	req.RequestURI, req.RemoteAddr = target, "limen-proxy"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	rec := httptest.NewRecorder()
	k.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated && rec.Code != http.StatusOK {
		var st metav1.Status
		_ = json.Unmarshal(rec.Body.Bytes(), &st)
		return zero, fmt.Errorf("%w: the rules review answered %d: %s", ErrAccess, rec.Code, st.Message)
	}
	var out authorizationv1.SelfSubjectRulesReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		return zero, fmt.Errorf("the rules review's answer: %w", err)
	}
	return out.Status, nil
}

// PathAccess is where the proxy serves "what may I do" (AccessHandler).
const PathAccess = "/v1/access"

// AccessHandler serves GET /v1/access?cluster=C&namespace=NS: the caller's
// Report as JSON, for limen kube access.
func (k *Kube) AccessHandler(principal func(*http.Request) (identity.Principal, time.Time, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, expires, err := principal(r)
		if err != nil {
			writeStatus(w, http.StatusUnauthorized, "Limen could not authenticate you ("+err.Error()+"); run limen login")
			return
		}
		if err := identity.ValidClient(p.ClientID); err != nil {
			writeStatus(w, http.StatusForbidden, "Limen refuses this credential: "+err.Error())
			return
		}
		if k.Locks != nil {
			if err := k.Locks.Check(p, k.Now()); err != nil {
				writeStatus(w, http.StatusForbidden, err.Error())
				return
			}
		}
		q, _ := url.ParseQuery(r.URL.RawQuery)
		cluster, ns := q.Get("cluster"), q.Get("namespace")
		if ns == "" {
			ns = "default"
		}
		if err := kpath.ValidCluster(cluster); err != nil {
			writeStatus(w, http.StatusBadRequest, "cluster: "+err.Error())
			return
		}
		rep, err := k.Access(r.Context(), p, expires, cluster, ns)
		switch {
		case errors.Is(err, ErrAccess):
			writeStatus(w, http.StatusForbidden, err.Error())
			return
		case err != nil:
			k.Logger.ErrorContext(r.Context(), "access review", "user", p.String(), "cluster", cluster, "err", err)
			writeStatus(w, http.StatusServiceUnavailable, "Limen could not answer what you may do: "+err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rep)
	})
}
