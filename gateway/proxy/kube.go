// Package proxy is Limen's user-facing side: it authenticates kubectl by
// client certificate, asks the policy which groups the user may assume on
// the target cluster, signs a grant and relays the request over a tunnel
// stream to a worker of that cluster.
//
// Kube.ServeHTTP (kube.go) is the request path; relay.go carries the request
// over the tunnel stream and relays the response or the upgraded stream.
// New (new.go) assembles the whole proxy from a Config; port.go is its one
// TLS port, and control.go its side of the workers' control streams
// (session events, recording chunks, lock pushes).
package proxy

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/bytesize"
	"github.com/limenhq/limen/gateway/grant"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/impersonate"
	"github.com/limenhq/limen/gateway/kpath"
	"github.com/limenhq/limen/gateway/kstatus"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/reqinfo"
	"github.com/limenhq/limen/gateway/scope"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/telemetry"
	"github.com/limenhq/limen/gateway/tunnel"
)

// Decider is the policy question the proxy asks.
type Decider interface {
	Groups(ctx context.Context, p identity.Principal, c policy.Cluster) (policy.Decision, error)
}

// Opener opens a tunnel stream to a worker of a cluster.
type Opener interface {
	Open(ctx context.Context, cluster string) (net.Conn, error)
}

// LockChecker refuses a locked principal with an error naming the lock.
type LockChecker interface {
	Check(p identity.Principal, now time.Time) error
}

// Registrar puts responses under the session watchdog, so that lock, kill
// and grant expiry can end them (sessions.Registry.Track), and tells how a
// session ended (Get).
type Registrar interface {
	Track(ctx context.Context, s sessions.Session) (*sessions.Live, error)
	Get(id string) (sessions.Info, bool)
}

// Authenticator turns a request's verified client certificate into a
// principal and the certificate's expiry.
type Authenticator func(r *http.Request) (identity.Principal, time.Time, error)

// Kube serves /k8s/CLUSTER/…, and every path of a connection whose TLS
// server name is CLUSTER.kube.PROXY: authenticate → decide → grant → tunnel.
type Kube struct {
	Authenticate Authenticator
	Policy       Decider
	Tunnel       Opener
	Audit        audit.Sink
	GrantKey     ed25519.PrivateKey
	// Locks and Sessions are optional; without them nobody is locked and
	// responses are not tracked.
	Locks    LockChecker
	Sessions Registrar
	// Clusters returns the labels the policy sees for a cluster name; an
	// unknown cluster has none.
	Clusters func(name string) policy.Cluster
	// KnownCluster reports whether a cluster name may be a metric label
	// value: one the operator configured or one a connected worker serves.
	// Any other name, which anyone can put in a path before authenticating,
	// is counted as telemetry.UnknownCluster; nil knows none.
	KnownCluster func(name string) bool
	// ProxyNames are the names the proxy is reached by: a connection whose
	// TLS server name is CLUSTER.kube.NAME for one of them routes to
	// CLUSTER whatever its path (kpath.ClusterFromServerName). New takes
	// them from the serving certificate's "*.kube.NAME" wildcards.
	ProxyNames []string
	// GrantTTL bounds a grant's life; it never outlives the certificate.
	GrantTTL time.Duration
	// AuditRoom, if set, says whether the audit trail has room for the
	// request's events (audit.Store.Room): a full one refuses the request
	// before anything is forwarded.
	AuditRoom func(ctx context.Context) error
	// Elevations re-checks the access requests a credential carries on
	// every request (requests.go); nil honours none.
	Elevations ElevationChecker
	// Requestable names, in a refusal for want of any group, the roles
	// the principal could request there (requests.go); nil names none.
	Requestable Requester
	// Starts finds a session's stored session.start when the registry no
	// longer knows the session (SessionEvent); nil: only the registry.
	Starts StartFinder
	// WorkerHeadTimeout and MaxWorkerHeadBytes bound a worker's answer on
	// a request stream once it starts (readHead); zero takes
	// DefaultWorkerHeadTimeout and DefaultMaxWorkerHeadBytes.
	WorkerHeadTimeout  time.Duration
	MaxWorkerHeadBytes int
	Logger             *slog.Logger
	Now                func() time.Time
	// Tracer makes each request's spans; nil makes none. Metrics records
	// each request's latency to its response head; nil records nothing.
	Tracer  trace.Tracer
	Metrics *telemetry.Metrics

	used       usedRequests
	relayOnce  sync.Once
	relay      *httputil.ReverseProxy
	signerOnce sync.Once
	signer     *grant.Signer
}

// DefaultGrantTTL is a grant's life when Kube.GrantTTL is zero. A grant
// covers one request or one stream, and a stream ends when its grant
// expires, so this bounds an exec session; the client certificate's expiry
// bounds it further.
const DefaultGrantTTL = 8 * time.Hour

// ServeHTTP handles one Kubernetes request: admit decides it, and the
// relay it returns forwards it. The relay runs once admit's frame (several
// KiB) is off the stack: an idle watch parks in it for its whole life, and
// a parked goroutine's stack shrinks only to four times what it uses.
func (k *Kube) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if relay := k.admit(w, r); relay != nil {
		relay()
	}
}

// admit runs every step before the tunnel (authenticate → decide → grant →
// track → open the stream) and returns the relay of the request, or nil
// once it answered the request itself. The relay ends the span and the
// session; admit does when it returns nil.
func (k *Kube) admit(w http.ResponseWriter, r *http.Request) (relay func()) {
	// Identity headers go first, before anything reads the request.
	impersonate.StripIdentity(r.Header)
	now := k.Now()
	ctx, span := k.startRequestSpan(r)
	defer func() {
		if relay == nil {
			span.End()
		}
	}()
	r = r.WithContext(ctx)
	serverCluster, _ := k.ServerCluster(r)
	cluster, path, err := kpath.FromRequest(r, serverCluster)
	if k.Tracer != nil || k.Metrics != nil {
		w = &observer{ResponseWriter: w, k: k, r: r, start: now, cluster: cluster, path: path}
	}
	if errors.Is(err, kpath.ErrClusterMismatch) {
		// A client that names two clusters is refused whoever it is; the
		// audit names who, when the certificate says.
		p, _, _ := k.Authenticate(r)
		k.denied(r, p, serverCluster, "cluster mismatch: "+err.Error())
		writeStatus(w, http.StatusBadRequest, "Limen refuses the request: "+err.Error()+
			"; use a kubeconfig written by limen kube login, whose server name alone names the cluster")
		return
	}
	if err != nil {
		k.denied(r, identity.Principal{}, serverCluster, "non-canonical path: "+err.Error())
		writeStatus(w, http.StatusBadRequest, "the request path is not canonical: "+err.Error())
		return
	}
	deny := func(code int, p identity.Principal, reason, msg string) {
		k.denied(r, p, cluster, reason)
		writeStatus(w, code, msg)
	}
	_, step := k.step(ctx, "limen.proxy.authenticate")
	p, certExpiry, err := k.authenticate(r)
	step.End()
	if err != nil {
		deny(http.StatusUnauthorized, identity.Principal{}, "authentication: "+err.Error(),
			"Limen could not authenticate you ("+err.Error()+"); run limen login")
		return
	}
	if k.Locks != nil {
		if err := k.Locks.Check(p, now); err != nil {
			deny(locks.HTTPStatus(err), p, "locked: "+err.Error(), err.Error())
			return
		}
	}
	if err := identity.ValidClient(p.ClientID); err != nil {
		// Never a fallback to the command line's identity: a credential
		// whose client is in doubt gets nothing.
		deny(http.StatusForbidden, p, "client: "+err.Error(),
			"Limen refuses this credential: "+err.Error()+"; run limen login (or limen kube login CLUSTER --app NAME) again")
		return
	}
	if k.AuditRoom != nil {
		if err := k.AuditRoom(r.Context()); err != nil {
			k.Logger.ErrorContext(r.Context(), "request refused: the audit trail has no room", "err", err)
			writeStatus(w, http.StatusServiceUnavailable, auditDownMessage(err, "the request was refused"))
			return
		}
	}
	p, elevatedUntil, err := k.elevate(r, p, cluster, now)
	if err != nil {
		k.Logger.ErrorContext(r.Context(), "access requests", "cluster", cluster, "user", p.String(), "err", err)
		writeStatus(w, http.StatusServiceUnavailable, "Limen cannot confirm your access requests (its store is unavailable); try again or ask your operator")
		return
	}
	pctx, step := k.step(ctx, "limen.proxy.policy")
	dec, p, elevated, err := k.decideElevated(pctx, p, k.Clusters(cluster))
	step.SetAttributes(attribute.Bool("limen.policy.cached", dec.Cached), attribute.String("limen.policy.revision", dec.Revision))
	step.End()
	if err != nil {
		k.Logger.ErrorContext(r.Context(), "policy decision", "cluster", cluster, "user", p.String(), "err", err)
		writeStatus(w, http.StatusServiceUnavailable, "Limen's policy is unavailable; try again or ask your operator")
		return
	}
	if dec.Scope == nil {
		deny(http.StatusForbidden, p, "client: "+p.ClientID+" is not registered",
			fmt.Sprintf("Limen policy does not register the client %q this credential was issued to; ask your Limen administrator", p.ClientID))
		return
	}
	if len(dec.Groups) == 0 {
		// An unknown cluster and one the user lost access to look the same
		// here, and must: telling them apart would list the clusters to
		// anyone who asks.
		deny(http.StatusForbidden, p, "policy grants no group on "+cluster,
			fmt.Sprintf("Limen policy grants %s no group on cluster %q: the cluster is unknown or you have no access to it "+
				"(limen kube ls lists the clusters you may reach)%s", p.QualifiedName(), cluster, k.requestHint(r, p, cluster)))
		return
	}
	if elevated {
		// The grant, and every stream under it, ends when the earliest
		// request it needs expires: not a second later.
		certExpiry = minTime(certExpiry, elevatedUntil)
		k.auditUse(r, p, cluster, dec.Groups, now)
	}
	info := k.classify(r, path)
	review := isReview(r, info)
	if !review && !dec.Scope.Allows(info, path.String()) {
		msg := scope.Refusal(p.ClientID, info, path.String())
		k.denied(r, p, cluster, scope.DeniedReason+": "+msg)
		writeStatusReason(w, http.StatusForbidden, scope.Reason, msg)
		return
	}
	_, step = k.step(ctx, "limen.proxy.grant")
	token, g, req, err := k.sign(r, p, dec, cluster, now, certExpiry, review)
	step.End()
	if err != nil {
		k.Logger.ErrorContext(r.Context(), "sign grant", "err", err)
		writeStatus(w, http.StatusInternalServerError, "Limen could not sign a grant")
		return
	}
	span.SetAttributes(attribute.String("limen.session", req.SessionID))
	ctx, live, kind, err := k.track(r, info, sessions.Session{ID: req.SessionID, Principal: p, Cluster: cluster, Expires: g.ExpiresAt})
	if o, ok := w.(*observer); ok && info != nil {
		o.verb = info.Verb // classified once, here
	}
	if err != nil {
		deny(http.StatusForbidden, p, "session refused: "+err.Error(), err.Error())
		return
	}
	defer func() {
		if relay == nil {
			k.untrack(r, live)
		}
	}()
	_, step = k.step(ctx, "limen.proxy.tunnel.open")
	stream, err := k.Tunnel.Open(ctx, cluster)
	step.End()
	if err != nil {
		if errors.Is(err, tunnel.ErrNoWorker) {
			writeStatus(w, http.StatusServiceUnavailable, fmt.Sprintf("no Limen worker is connected for cluster %q: "+
				"the cluster is unknown to this proxy or its worker is not running (limen kube ls lists your clusters and their workers)", cluster))
			return
		}
		writeStatus(w, http.StatusBadGateway, "Limen could not reach the worker: "+err.Error())
		return
	}
	st := &relayState{conn: stream, token: token, grant: g, request: req, path: path, live: live,
		streamed: kind != sessions.KindNone, w: w, sent: sentEvent(r, now, path, info, g, req)}
	out := r.WithContext(context.WithValue(ctx, relayKey{}, st))
	return func() {
		defer span.End()
		defer k.untrack(r, live)
		k.forward(w, out, st)
	}
}

// ServerCluster returns the cluster that r's TLS server name names, and
// whether it names one (ProxyNames). Such a connection is the Kubernetes
// API of that cluster on every path.
func (k *Kube) ServerCluster(r *http.Request) (string, bool) {
	if r.TLS == nil || r.TLS.ServerName == "" {
		return "", false
	}
	return kpath.ClusterFromServerName(r.TLS.ServerName, k.ProxyNames)
}

// sign returns the grant for p's decision on cluster, reused from an
// earlier request when the same decision was signed moments ago
// (grant.Signer), and this request's own facts: with the grant, the proxy's
// record of whom, where and as which groups the stream is for.
func (k *Kube) sign(r *http.Request, p identity.Principal, dec policy.Decision, cluster string, now, certExpiry time.Time, review bool) ([]byte, grant.Grant, grant.Request, error) {
	sid, err := grant.NewSessionID()
	if err != nil {
		return nil, grant.Grant{}, grant.Request{}, err
	}
	ttl := k.GrantTTL
	if ttl <= 0 {
		ttl = DefaultGrantTTL
	}
	exp := now.Add(ttl)
	if certExpiry.Before(exp) {
		exp = certExpiry
	}
	k.signerOnce.Do(func() {
		// A reused grant shortens a stream's life by at most the reuse
		// window: a tenth of the TTL, and never more than a minute.
		k.signer = &grant.Signer{Key: k.GrantKey, Reuse: min(grant.DefaultReuse, ttl/10)}
	})
	g := grant.Grant{Principal: p, Groups: dec.Groups, Cluster: cluster, IssuedAt: now, ExpiresAt: exp}
	if review {
		g.Purpose = grant.PurposeAccessReview
	}
	token, g, err := k.signer.Sign(g, dec.Revision, certExpiry)
	return token, g, grant.Request{SessionID: sid, ClientAddr: r.RemoteAddr, TraceParent: traceParent(r.Context())}, err
}

// classify reads the request as the API server will (reqinfo), from the
// canonical path that is forwarded; nil when it cannot (the worker answers
// such a request 400, and no scope allows it).
func (k *Kube) classify(r *http.Request, path kpath.Path) *reqinfo.Info {
	info, err := reqinfo.Classify(r, path)
	if err != nil {
		return nil
	}
	return &info
}

// track puts the response under the session watchdog and returns the
// context that ends when it is locked, killed or expires, and what kind of
// stream the request opens. A stream (sessions.Classify of the request's
// classification, nil when it has none) is listed as a session; every
// other response is only guarded.
func (k *Kube) track(r *http.Request, info *reqinfo.Info, s sessions.Session) (context.Context, *sessions.Live, sessions.Kind, error) {
	if info != nil {
		st := sessions.Classify(r, *info)
		s.Kind, s.Target = st.Kind, st.Target
	}
	if s.Kind != sessions.KindNone {
		liftDeadlines(r) // a stream lasts as long as its grant (port.go)
	}
	if k.Sessions == nil {
		return r.Context(), nil, s.Kind, nil
	}
	live, err := k.Sessions.Track(r.Context(), s)
	if err != nil {
		return nil, nil, s.Kind, err
	}
	return live.Context(), live, s.Kind, nil
}

func (k *Kube) untrack(r *http.Request, live *sessions.Live) {
	if live == nil {
		return
	}
	if e := live.Ended(); e != nil && e.Reason == sessions.ReasonWorkerLost {
		k.recordLostEnd(r.Context(), live.Info())
		return
	}
	if r.Context().Err() != nil {
		live.End(sessions.ReasonClientClosed)
		return
	}
	live.End(sessions.ReasonCompleted)
}

// denied records a refusal at the proxy. A refusal that cannot be audited
// is still a refusal, so the error is only logged.
func (k *Kube) denied(r *http.Request, p identity.Principal, cluster, reason string) {
	ev := audit.Event{
		Type: audit.TypeAuthDenied, Time: k.Now(), Principal: p, Cluster: cluster, ClientAddr: r.RemoteAddr,
		Denied: &audit.Denied{Hop: audit.HopProxy, Action: audit.ActionKube, Reason: reason, Path: audit.RequestPath(r.RequestURI)},
	}
	if err := k.Audit.Emit(r.Context(), ev); err != nil {
		k.Logger.ErrorContext(r.Context(), "audit auth.denied", "err", err, "reason", reason)
	}
	k.Metrics.Denied(r.Context(), telemetry.HopProxy, denialCode(reason))
}

// auditDownMessage tells the user why the audit trail cannot take the
// request, and what became of it: the limit, when it is full.
func auditDownMessage(err error, what string) string {
	var full *audit.FullError
	if errors.As(err, &full) {
		return fmt.Sprintf("Limen's audit database is full (its limit, audit-max-bytes, is %s), so %s: Limen forwards nothing it cannot audit. "+
			"Ask your operator to delete or archive old audit events or raise audit-max-bytes", bytesize.Format(full.Max), what)
	}
	return "Limen's audit trail is unavailable, so " + what + "; try again later"
}

// writeStatus answers the request itself (kstatus.Refusal).
func writeStatus(w http.ResponseWriter, code int, msg string) {
	writeStatusReason(w, code, "", msg)
}

// writeStatusReason is writeStatus with the Status reason given, for a
// refusal a client must tell from the API server's own (scope.Reason).
func writeStatusReason(w http.ResponseWriter, code int, reason, msg string) {
	h, body := kstatus.RefusalReason(code, reason, msg)
	for k, v := range h {
		w.Header()[k] = v
	}
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
