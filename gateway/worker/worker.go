// Package worker is Limen's cluster-side hop: for each tunnel stream it
// verifies the grant, re-checks the groups against its own policy, strips
// every client identity header, impersonates, forwards to the one API server
// it was configured with, and audits — the event travelling ahead of the
// response on the same stream.
//
// Handler.ServeStream (worker.go) is the request path, step by step; the
// steps live in exchange.go, a stream's audited life (session.start, the
// recording, session.end) in session.go, the relay of an upgraded stream
// and the tap that records it in relay.go, the HTTP/1.1 the worker writes
// back in response.go, and the transports to the API server in upstream.go.
// New (new.go) assembles the whole worker from a Config; control.go is the
// worker's side of the control stream (lock and kill pushes, EventRelay).
package worker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/grant"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/impersonate"
	"github.com/limenhq/limen/gateway/kpath"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/scope"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/telemetry"
)

// Rechecker is the worker's own policy: which of the granted groups it
// still allows.
type Rechecker interface {
	AllowGroups(ctx context.Context, p identity.Principal, c policy.Cluster, groups []string) ([]string, string, error)
}

// Scopes is the worker's own policy's client registry: a client's compiled
// scope, and whether the policy registers it (policy.Engine.Scope).
type Scopes interface {
	Scope(client string) (sc *scope.Scope, ok bool, revision string, err error)
}

// Handler serves tunnel streams for one cluster.
type Handler struct {
	Cluster  policy.Cluster
	GrantKey ed25519.PublicKey
	Policy   Rechecker
	// Scopes matches each request against its client's scope again, from
	// the worker's own policy, and gives the client's user-name prefix.
	// New always sets it; nil (unit tests of other steps only) skips the
	// scope check and the client prefix.
	Scopes Scopes
	// Upstream is the API server's https URL; Transport carries its CA.
	Upstream  *url.URL
	Transport http.RoundTripper
	// Token returns the worker's current ServiceAccount token.
	Token func() (string, error)
	// TokenRefused, if set, is told of a token the API server refused
	// (401), so that Token reads it again (TokenFile.Refused).
	TokenRefused func(token string)
	// Impersonation maps principals to Kubernetes user names and names the
	// RBAC variant the cluster grants; the zero value is bare names, legacy.
	Impersonation impersonate.Config
	// Locks and Sessions are the worker's own copy of the proxy's locks and
	// the watchdog over its responses; nil means nobody is locked and
	// responses are not tracked.
	Locks interface {
		Check(identity.Principal, time.Time) error
	}
	Sessions interface {
		Track(ctx context.Context, s sessions.Session) (*sessions.Live, error)
	}
	Logger *slog.Logger
	Now    func() time.Time
	// Events stores session.start and session.end in the proxy's audit
	// trail, returning nil only once stored; nil refuses every stream. A
	// stream goes upstream only once its session.start is stored (and, for
	// exec and attach, its recording is open in Spool).
	Events func(ctx context.Context, e audit.Event) error
	// Spool keeps exec and attach recordings until uploaded; nil refuses
	// exec and attach. Recorded, if set, is told of each committed one.
	Spool    *recording.Spool
	Recorded func(recording.Item)
	// RecordingMaxBytes caps each recording; a session whose recording
	// reaches it is ended. 0 means recording.DefaultMaxBytes.
	RecordingMaxBytes int64
	// Upgrades carries upgrade requests (SPDY needs HTTP/1.1, which an
	// HTTP/2 transport cannot do); nil uses Transport.
	Upgrades http.RoundTripper
	// Backlog bounds the API server output a stream reads ahead of the
	// user (see relay.go).
	Backlog Backlog
	// Tracer makes each request's spans, children of the proxy's span the
	// grant request names; nil makes none. Metrics records each request's
	// duration; nil records nothing.
	Tracer  trace.Tracer
	Metrics *telemetry.Metrics

	// active counts the request streams being served (Server.drain).
	active atomic.Int64

	// verifier checks each distinct grant's signature once.
	verifierOnce sync.Once
	verifier     *grant.Verifier
}

// Backlog is where a stream keeps the API server's output it read ahead of
// the user: up to Memory bytes in memory, the rest in a file in Dir ("" is
// the system's temporary directory), at most Max bytes in all. Zero sizes
// take the defaults.
type Backlog struct {
	Dir         string
	Memory, Max int64
}

// Default Backlog sizes: a stream that outruns its user by more than
// DefaultBacklogMax is slowed down again by TCP back-pressure.
const (
	DefaultBacklogMemory = 1 << 20
	DefaultBacklogMax    = 1 << 30
)

// headerTimeout bounds how long a new stream may take to deliver its grant
// and request head.
const headerTimeout = 30 * time.Second

// refusal is a request the worker answers itself.
type refusal struct {
	code   int
	msg    string
	reason string // for audit; empty when the refusal is not a denial
}

// statusReason is the Status reason of the answer: scope.Reason for an
// out-of-scope refusal, so that a client tells it from Kubernetes' own 403;
// otherwise the code's usual one.
func (r *refusal) statusReason() string {
	if strings.HasPrefix(r.reason, scope.DeniedReason+": ") {
		return scope.Reason
	}
	return ""
}

func (r *refusal) Error() string { return r.msg }

// ServeStream handles one request stream from the proxy; it is the tunnel
// client's Handler. It reads as the steps each request takes, one named
// function each (see DESIGN.md §1):
//
//	admit → classify → track → impersonate → open the session (streams)
//	→ round trip → audit → respond, or upgrade
//
// A step that refuses answers the request itself, after its audit event;
// nothing reaches the API server before every step ahead of the round trip
// has passed.
func (h *Handler) ServeStream(ctx context.Context, stream net.Conn) {
	h.active.Add(1)
	defer h.active.Add(-1)
	defer stream.Close()
	x, token, preq, err := h.readRequest(stream)
	if err != nil {
		h.Logger.Warn("bad request stream", "err", err)
		return // not a proxy speaking the protocol: nothing to answer
	}
	ctx, span := h.startRequestSpan(ctx, preq)
	defer span.End()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	x.req = x.req.WithContext(ctx)

	var rf *refusal
	actx, admitSpan := h.startSpan(ctx, "limen.worker.admit", trace.SpanKindInternal)
	x.adm, rf = h.admit(actx, token, preq, x.req)
	admitSpan.End()
	if rf != nil {
		x.refuse(rf)
		return
	}
	if rf = x.classify(); rf != nil {
		x.refuse(rf)
		return
	}
	if rf = x.checkScope(); rf != nil {
		x.refuse(rf)
		return
	}
	ctx, untrack, rf := x.track(ctx)
	if rf != nil {
		x.refuse(rf)
		return
	}
	defer untrack()
	out, rf := x.impersonate(ctx)
	if rf != nil {
		x.refuse(rf)
		return
	}
	s, rf := x.openSession(ctx)
	if rf != nil {
		x.refuse(rf) // the API server never sees the request
		return
	}
	resp := x.roundTrip(ctx, out, s)
	if resp == nil {
		return // answered, or the proxy is gone
	}
	defer resp.Body.Close()
	ev := x.kubeEvent(resp.StatusCode) // audit
	if x.upgrading {
		x.upgrade(ctx, resp, s, ev)
		return
	}
	x.respond(ctx, cancel, resp, s, ev)
}

// readRequest reads the preamble (the grant, then this stream's
// grant.Request) and the request head from a new stream, within
// headerTimeout.
func (h *Handler) readRequest(stream net.Conn) (*exchange, []byte, grant.Request, error) {
	start := h.Now()
	// Elapsed time, on the monotonic clock: not h.Now, the clock of the
	// checks, which a test sets off.
	_ = stream.SetReadDeadline(time.Now().Add(headerTimeout))
	br := bufio.NewReader(stream) // large reads bypass the buffer; an idle stream holds only 4 KiB
	token, err := readGrant(br)
	if err != nil {
		return nil, nil, grant.Request{}, fmt.Errorf("preamble: %w", err)
	}
	preq, err := grant.ReadRequest(br)
	if err != nil {
		return nil, nil, grant.Request{}, fmt.Errorf("preamble: %w", err)
	}
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, nil, grant.Request{}, fmt.Errorf("request: %w", err)
	}
	_ = stream.SetReadDeadline(time.Time{})
	return &exchange{h: h, stream: stream, br: br, req: req, start: start}, token, preq, nil
}

// noGrant is the preamble of a stream that carries no grant: a grant
// length of zero, which grant.WritePreamble never writes.
var noGrant = []byte{0, 0, 0, 0}

// readGrant reads the stream's grant, or nil when the stream says it
// carries none: such a stream still names its session, so admit refuses
// it audited, under that session, instead of dropping it unseen.
func readGrant(br *bufio.Reader) ([]byte, error) {
	if head, err := br.Peek(len(noGrant)); err == nil && bytes.Equal(head, noGrant) {
		_, _ = br.Discard(len(noGrant))
		return nil, nil
	}
	return grant.ReadPreamble(br, grant.MaxTokenSize)
}

// admission is what admit decided. Every later step reads it, so none
// reaches back for an earlier, different copy: the groups impersonated are
// the groups audited.
type admission struct {
	grant grant.Grant
	// req is this stream's own facts: its session id and client address.
	req  grant.Request
	path kpath.Path // the canonical path below the cluster, as forwarded
	// groups are the granted groups the worker's policy still allows: the
	// groups impersonated and the groups in every event. Nil until the
	// re-check ran.
	groups []string
	// scope is the client's scope in the worker's policy (nil without
	// Handler.Scopes): checkScope matches the request against it, and its
	// UserPrefix names the user to the API server.
	scope *scope.Scope
}

// admit runs every check before forwarding: grant, lock, path and the
// policy re-check. Client identity headers are deleted first.
func (h *Handler) admit(ctx context.Context, token []byte, preq grant.Request, req *http.Request) (admission, *refusal) {
	adm := admission{req: preq}
	// Identity headers go before anything else reads the request.
	impersonate.StripIdentity(req.Header)
	if len(token) == 0 {
		return adm, &refusal{http.StatusForbidden, "this request reached the Limen worker with no Limen grant, so it refuses it",
			"grant: missing"}
	}
	h.verifierOnce.Do(func() { h.verifier = &grant.Verifier{Key: h.GrantKey, Cluster: h.Cluster.Name} })
	g, err := h.verifier.Verify(token, h.Now())
	adm.grant = g
	if err != nil {
		if errors.Is(err, grant.ErrWrongCluster) {
			// The proxy routed to a worker that does not serve the cluster:
			// an operator problem, not a verdict on the user.
			return adm, &refusal{http.StatusServiceUnavailable,
				"this Limen worker does not serve the requested cluster", "grant for another cluster: " + err.Error()}
		}
		return adm, &refusal{http.StatusForbidden, "Limen grant refused: " + err.Error(), "grant: " + err.Error()}
	}
	if h.Locks != nil {
		if err := h.Locks.Check(g.Principal, h.Now()); err != nil {
			return adm, &refusal{http.StatusForbidden, err.Error(), "locked: " + err.Error()}
		}
	}
	if err := identity.ValidClient(g.Principal.ClientID); err != nil {
		return adm, &refusal{http.StatusForbidden, "Limen refuses this credential: " + err.Error(), "client: " + err.Error()}
	}
	rawPath, _, _ := strings.Cut(req.RequestURI, "?")
	adm.path, err = kpath.Parse(rawPath)
	if err != nil {
		return adm, &refusal{http.StatusBadRequest, "the request path is not canonical: " + err.Error(), ""}
	}
	allowed, revision, err := h.Policy.AllowGroups(ctx, g.Principal, h.Cluster, g.Groups)
	if err != nil {
		return adm, &refusal{http.StatusServiceUnavailable, "the Limen worker's policy is unavailable", ""}
	}
	if len(allowed) == 0 {
		return adm, &refusal{http.StatusForbidden,
			fmt.Sprintf("the worker's policy allows %s none of the granted groups on %q", g.Principal.Name, h.Cluster.Name),
			"worker policy allows none of " + strings.Join(g.Groups, ",")}
	}
	adm.groups = allowed
	if h.Scopes != nil {
		sc, ok, scopeRevision, err := h.Scopes.Scope(g.Principal.ClientID)
		if err != nil {
			return adm, &refusal{http.StatusServiceUnavailable, "the Limen worker's policy is unavailable", ""}
		}
		if scopeRevision != revision {
			// A bundle activated between the two reads: groups from one
			// policy and a scope from another are no decision at all.
			return adm, &refusal{http.StatusServiceUnavailable, "the Limen worker's policy changed during the request; try again", ""}
		}
		if !ok {
			return adm, &refusal{http.StatusForbidden,
				fmt.Sprintf("the worker's policy does not register the client %q", g.Principal.ClientID),
				"client: " + g.Principal.ClientID + " is not registered"}
		}
		adm.scope = sc
	}
	return adm, nil
}
