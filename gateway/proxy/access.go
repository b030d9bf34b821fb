package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limenhq/limen/gateway/access"
	"github.com/limenhq/limen/gateway/bytesize"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/kpath"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/reqinfo"
)

// reviewKey marks a request the proxy makes itself for Access: it carries
// the principal it is made as. Only code in this process can set a context
// value, so no client can claim it.
type reviewKey struct{}

type reviewAs struct {
	p       identity.Principal
	expires time.Time
	// target is the one request target the principal is lent to.
	target string
}

// errReviewTarget refuses the review's principal to any other request: a
// second guard behind reviewTarget, so that no spelling of a cluster can
// lend p's identity to another path.
var errReviewTarget = errors.New("the proxy's own access review may only post its SelfSubjectRulesReview")

// authenticate is Authenticate, or the principal of the proxy's own
// access review, for exactly the request that review makes.
func (k *Kube) authenticate(r *http.Request) (identity.Principal, time.Time, error) {
	if rv, ok := r.Context().Value(reviewKey{}).(reviewAs); ok {
		if r.Method != http.MethodPost || rv.target == "" || r.RequestURI != rv.target {
			return identity.Principal{}, time.Time{}, errReviewTarget
		}
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

// ErrAccessInput is a question Access cannot ask: the cluster is not a
// cluster name. Callers answer 400.
var ErrAccessInput = errors.New("access review: bad request")

// MaxReviewAnswer bounds the rules review's answer that Access reads: a
// SelfSubjectRulesReview lists the rules of every role bound to the
// identity, far below this for any cluster people run.
const MaxReviewAnswer = 4 << 20

// Access answers "what may I do" for p (its client included) on cluster in
// namespace: it asks the API server a SelfSubjectRulesReview as p's
// identity there — through the worker, with the groups and user name policy
// gives p's client, under a grant that carries only that review — and
// combines the rules with the client's scope (access.Compute). The console
// calls it with its own principals; GET /v1/access serves it to the CLI.
func (k *Kube) Access(ctx context.Context, p identity.Principal, expires time.Time, cluster, namespace string) (access.Report, error) {
	target, err := reviewTarget(cluster)
	if err != nil {
		return access.Report{}, err
	}
	dec, err := k.Policy.Groups(ctx, p, k.Clusters(cluster))
	if err != nil {
		return access.Report{}, err
	}
	if dec.Scope == nil {
		return access.Report{}, fmt.Errorf("%w: policy does not register the client %q", ErrAccess, p.ClientID)
	}
	var rules authorizationv1.SubjectRulesReviewStatus
	if len(dec.Groups) > 0 {
		if rules, err = k.rulesReview(ctx, p, expires, target, namespace); err != nil {
			return access.Report{}, err
		}
	}
	rep := access.Compute(dec.Scope, namespace, rules, access.ResourcesFor(dec.Scope))
	rep.Cluster = cluster
	return rep, nil
}

// reviewTarget is the request target of the rules review on cluster,
// built from parts kpath checks and read back by the parser the request
// path will meet: cluster is one DNS label, and the target is the review's
// path on it, nothing else (no query, no other path).
func reviewTarget(cluster string) (string, error) {
	if err := kpath.ValidCluster(cluster); err != nil {
		return "", fmt.Errorf("%w: %w", ErrAccessInput, err)
	}
	rest, err := kpath.Parse(access.RulesReviewPath)
	if err != nil {
		return "", fmt.Errorf("the rules review's path: %w", err)
	}
	target := kpath.Prefix + cluster + rest.String()
	c, p, err := kpath.SplitProxyPath(target)
	if err != nil || c != cluster || p != rest {
		return "", fmt.Errorf("%w: cluster %q does not make the rules review's path", ErrAccessInput, cluster)
	}
	return target, nil
}

// rulesReview posts the SelfSubjectRulesReview to target through the
// proxy's own request path, so that it is authorized, granted, tunnelled,
// impersonated and audited like any request of p's. The answer is read up
// to MaxReviewAnswer.
func (k *Kube) rulesReview(ctx context.Context, p identity.Principal, expires time.Time, target, namespace string) (authorizationv1.SubjectRulesReviewStatus, error) {
	var zero authorizationv1.SubjectRulesReviewStatus
	body, _ := json.Marshal(authorizationv1.SelfSubjectRulesReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectRulesReview"},
		Spec:     authorizationv1.SelfSubjectRulesReviewSpec{Namespace: namespace},
	})
	ctx = context.WithValue(ctx, reviewKey{}, reviewAs{p: p, expires: expires, target: target})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return zero, err
	}
	req.RequestURI, req.RemoteAddr = target, "limen-proxy"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	rec := &reviewAnswer{header: http.Header{}}
	k.serveReview(rec, req)
	if rec.over {
		return zero, fmt.Errorf("%w: the rules review's answer is larger than %s, the most Limen reads; ask about a namespace, or ask your administrator why so many roles are bound to you",
			ErrAccess, bytesize.Format(MaxReviewAnswer))
	}
	if rec.code != http.StatusCreated && rec.code != http.StatusOK {
		var st metav1.Status
		_ = json.Unmarshal(rec.body.Bytes(), &st)
		return zero, fmt.Errorf("%w: the rules review answered %d: %s", ErrAccess, rec.code, st.Message)
	}
	var out authorizationv1.SelfSubjectRulesReview
	if err := json.Unmarshal(rec.body.Bytes(), &out); err != nil {
		return zero, fmt.Errorf("the rules review's answer: %w", err)
	}
	return out.Status, nil
}

// serveReview is ServeHTTP for the review. The relay aborts a response it
// cannot write whole with http.ErrAbortHandler, which here would abort the
// caller's own request (the console page): the abort stays in the review,
// whose reviewAnswer says why.
func (k *Kube) serveReview(w *reviewAnswer, r *http.Request) {
	defer func() {
		if v := recover(); v != nil && v != http.ErrAbortHandler {
			panic(v)
		}
	}()
	k.ServeHTTP(w, r)
}

// errReviewTooLarge ends a rules review's answer past MaxReviewAnswer.
var errReviewTooLarge = errors.New("rules review answer too large")

// reviewAnswer is the ResponseWriter the review is answered into: it keeps
// at most MaxReviewAnswer bytes and fails every write past them.
type reviewAnswer struct {
	header http.Header
	code   int
	body   bytes.Buffer
	over   bool
}

func (a *reviewAnswer) Header() http.Header { return a.header }

func (a *reviewAnswer) WriteHeader(code int) {
	if a.code == 0 {
		a.code = code
	}
}

func (a *reviewAnswer) Write(p []byte) (int, error) {
	a.WriteHeader(http.StatusOK)
	if a.over || a.body.Len()+len(p) > MaxReviewAnswer {
		a.over = true
		return 0, errReviewTooLarge
	}
	return a.body.Write(p)
}

// Flush is a no-op: the answer is read once it is whole.
func (a *reviewAnswer) Flush() {}

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
				writeStatus(w, locks.HTTPStatus(err), err.Error())
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
		case errors.Is(err, ErrAccessInput):
			writeStatus(w, http.StatusBadRequest, err.Error())
			return
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
