package apihttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
)

// AdminPolicy authorizes admin actions (data.limen.admin.allow).
type AdminPolicy interface {
	AdminAllow(ctx context.Context, p identity.Principal, action string) (bool, error)
}

// Gate holds what the caller checks need: who the caller is, the locks in
// force, the admin policy, and the audit trail for refusals and for the
// handlers' own events.
type Gate struct {
	// Principal returns the principal of the request's verified client
	// certificate (ca.Authority.PrincipalFromRequest). Required.
	Principal func(*http.Request) (identity.Principal, error)
	// Locks are the locks in force; a locked caller is refused every admin
	// call, unlocking themself included. Required.
	Locks *locks.Set
	// Policy authorizes admin actions. Required.
	Policy AdminPolicy
	// Audit records refusals and the handlers' events. Required.
	Audit audit.Sink
	// ClientAddr extracts the caller's address; nil means RemoteIP. Set it
	// when behind a trusted load balancer.
	ClientAddr func(*http.Request) string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives operational logs; nil means slog.Default().
	Logger *slog.Logger
}

// API is one of the proxy's /v1/ APIs: endpoints registered behind the
// Gate's caller checks, answered with no-store, and a JSON 404 for the
// rest. Handlers use its Gate (filled in with defaults) to emit events.
type API struct {
	Gate
	mux *http.ServeMux
}

// New checks g's required fields, fills in the defaults and returns an API
// with no endpoints yet. name is the package, for the errors ("authapi").
func New(name string, g Gate) (*API, error) {
	switch {
	case g.Principal == nil:
		return nil, fmt.Errorf("%s: principal function is required", name)
	case g.Locks == nil:
		return nil, fmt.Errorf("%s: lock set is required: admin calls check locks", name)
	case g.Policy == nil:
		return nil, fmt.Errorf("%s: admin policy is required", name)
	case g.Audit == nil:
		return nil, fmt.Errorf("%s: audit sink is required", name)
	}
	if g.ClientAddr == nil {
		g.ClientAddr = RemoteIP
	}
	if g.Now == nil {
		g.Now = time.Now
	}
	if g.Logger == nil {
		g.Logger = slog.Default()
	}
	a := &API{Gate: g, mux: http.NewServeMux()}
	a.mux.HandleFunc("/", notFound)
	return a, nil
}

// ServeHTTP implements http.Handler. Answers are never cached: they carry
// certificates, tokens and user lists.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	a.mux.ServeHTTP(w, r)
}

// PrincipalHandler serves a request whose caller the Gate has checked.
type PrincipalHandler func(http.ResponseWriter, *http.Request, identity.Principal)

// Public serves pattern to anyone (login, enrollment).
func (a *API) Public(pattern string, h http.HandlerFunc) { a.mux.HandleFunc(pattern, h) }

// Authenticated serves pattern to the holder of a verified user or bot
// certificate that has not expired (a kept-alive connection can outlive
// its certificate) and who has no lock in force: the checks /k8s/ makes.
// Every refusal is audited as auth.denied with action admin.
func (a *API) Authenticated(pattern string, h PrincipalHandler) {
	a.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if p, ok := a.admit(w, r, pattern); ok {
			h(w, r, p)
		}
	})
}

// Admin serves pattern as Authenticated does, and only to a caller whom the
// policy allows action. Every refusal is audited as auth.denied with
// action admin.
func (a *API) Admin(pattern, action string, h PrincipalHandler) {
	a.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		what := "admin action " + action
		p, ok := a.admit(w, r, what)
		if !ok {
			return
		}
		allowed, err := a.Policy.AdminAllow(r.Context(), p, action)
		if err != nil {
			a.Logger.Error("admin policy evaluation failed", "action", action, "principal", p.String(), "err", err)
			WriteError(w, http.StatusServiceUnavailable, "policy unavailable: try again later")
			return
		}
		if !allowed {
			a.Deny(r, p, audit.ActionAdmin, what+" not allowed"+throughClient(p), nil)
			WriteError(w, http.StatusForbidden, fmt.Sprintf("policy does not allow %s%s to %s", p, throughClient(p), action))
			return
		}
		h(w, r, p)
	})
}

// throughClient names an application credential's client in a refusal, so
// that "alice may not" reads as what it is: alice may, her application may
// not. Limen's own clients are the usual case and are not named.
func throughClient(p identity.Principal) string {
	switch p.ClientID {
	case identity.ClientKubectl, identity.ClientConsole:
		return ""
	}
	return " through client " + p.ClientID
}

// admit is the caller check of every call that needs a certificate, on
// every request (not once per connection): a verified, unexpired
// certificate of a principal who is not locked. A locked admin is refused
// here whatever they ask, unlocking themself included; the break-glass is
// the proxy host's local store (limen unlock --local). It answers and
// audits a refusal itself; what names the call in the audited reason.
func (a *API) admit(w http.ResponseWriter, r *http.Request, what string) (identity.Principal, bool) {
	p, err := a.authenticate(r)
	if err != nil {
		a.Deny(r, identity.Principal{}, audit.ActionAdmin, what+": "+err.Error(), nil)
		WriteError(w, http.StatusUnauthorized, err.Error())
		return identity.Principal{}, false
	}
	if err := a.Locks.Check(p, a.Now()); err != nil {
		a.Deny(r, p, audit.ActionAdmin, what+": locked: "+err.Error(), nil)
		WriteError(w, locks.HTTPStatus(err), err.Error())
		return identity.Principal{}, false
	}
	return p, true
}

// ErrCertificateExpired refuses a certificate past its NotAfter on a
// connection opened while it was valid.
var ErrCertificateExpired = errors.New("client certificate expired")

// expiredError is ErrCertificateExpired naming whose certificate and when.
type expiredError struct {
	p        identity.Principal
	notAfter time.Time
}

func (e *expiredError) Error() string {
	return fmt.Sprintf("client certificate expired at %s (%s): run limen login",
		e.notAfter.UTC().Format(time.RFC3339), e.p)
}

func (e *expiredError) Is(target error) bool { return target == ErrCertificateExpired }

// authenticate returns the principal of r's verified client certificate,
// refusing one past its NotAfter: TLS checked the expiry only when the
// connection was made, and an HTTP/2 connection can stay open for hours.
// An expired certificate is refused as unauthenticated (no principal); the
// error names its holder.
func (g *Gate) authenticate(r *http.Request) (identity.Principal, error) {
	p, err := g.Principal(r)
	if err != nil {
		return identity.Principal{}, err
	}
	// The leaf of the verified chain is the certificate presented. A
	// Principal function that accepted a request without one is a wiring
	// bug; refuse rather than skip the expiry check.
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return identity.Principal{}, errors.New("no verified client certificate: run limen login")
	}
	if notAfter := r.TLS.VerifiedChains[0][0].NotAfter; g.Now().After(notAfter) {
		return identity.Principal{}, &expiredError{p: p, notAfter: notAfter}
	}
	return p, nil
}

// Emit records e with the time (when unset) and the caller's address. An
// error means the event is not recorded; it is logged here.
func (g *Gate) Emit(r *http.Request, e audit.Event) error {
	if e.Time.IsZero() {
		e.Time = g.Now()
	}
	e.ClientAddr = g.ClientAddr(r)
	if err := g.Audit.Emit(r.Context(), e); err != nil {
		g.Logger.Error("audit event not recorded", "type", e.Type, "err", err)
		return err
	}
	return nil
}

// maxReason bounds a refusal's reason, which may quote what the client
// sent.
const maxReason = 1024

// Deny records a refusal of r as auth.denied at the proxy, by p (zero when
// the caller is unknown), refusing action (audit.ActionAdmin, …), with
// optional details. The path and reason are bounded, so that no request,
// however long its target, makes an event the audit trail refuses. The
// refusal stands whether or not it is recorded: refusing needs no audit
// trail.
func (g *Gate) Deny(r *http.Request, p identity.Principal, action, reason string, fields map[string]string) {
	if len(reason) > maxReason {
		reason = strings.ToValidUTF8(reason[:maxReason], "") + "…"
	}
	_ = g.Emit(r, audit.Event{Type: audit.TypeAuthDenied, Principal: p, Fields: fields,
		Denied: &audit.Denied{Hop: audit.HopProxy, Action: action, Reason: reason, Path: audit.RequestPath(r.RequestURI)}})
}
