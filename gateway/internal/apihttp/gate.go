package apihttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
)

// AdminPolicy authorizes admin actions (data.limen.admin.allow).
type AdminPolicy interface {
	AdminAllow(ctx context.Context, p identity.Principal, action string) (bool, error)
}

// Gate decides who may call an endpoint, audits what it refuses, and
// records the handlers' own events with the caller's address. Build it
// with NewGate.
type Gate struct {
	// Principal returns the principal of the request's verified client
	// certificate (auth.Authority.PrincipalFromRequest). Required.
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

// NewGate checks g's required fields and fills in the defaults. api names
// the package for the errors ("authapi").
func NewGate(api string, g Gate) (*Gate, error) {
	switch {
	case g.Principal == nil:
		return nil, fmt.Errorf("%s: principal function is required", api)
	case g.Locks == nil:
		return nil, fmt.Errorf("%s: lock set is required: admin calls check locks", api)
	case g.Policy == nil:
		return nil, fmt.Errorf("%s: admin policy is required", api)
	case g.Audit == nil:
		return nil, fmt.Errorf("%s: audit sink is required", api)
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
	return &g, nil
}

// PrincipalHandler serves a request whose caller the Gate has checked.
type PrincipalHandler func(http.ResponseWriter, *http.Request, identity.Principal)

// Authenticated requires a verified user or bot certificate that has not
// expired (a kept-alive connection can outlive its certificate).
func (g *Gate) Authenticated(next PrincipalHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := g.authenticate(r)
		if err != nil {
			WriteError(w, http.StatusUnauthorized, err.Error())
			return
		}
		next(w, r, p)
	}
}

// Admin requires what Authenticated does, no lock on the caller (the same
// checks as /k8s/), and the policy's consent for action. Every refusal is
// audited as auth.denied.
func (g *Gate) Admin(action string, next PrincipalHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := g.authenticate(r)
		if err != nil {
			g.Deny(r, identity.Principal{}, "admin action "+action+": "+err.Error(), nil)
			WriteError(w, http.StatusUnauthorized, err.Error())
			return
		}
		if err := g.Locks.Check(p, g.Now()); err != nil {
			g.Deny(r, p, "admin action "+action+": locked: "+err.Error(), nil)
			WriteError(w, http.StatusForbidden, err.Error())
			return
		}
		ok, err := g.Policy.AdminAllow(r.Context(), p, action)
		if err != nil {
			g.Logger.Error("admin policy evaluation failed", "action", action, "principal", p.String(), "err", err)
			WriteError(w, http.StatusServiceUnavailable, "policy unavailable: try again later")
			return
		}
		if !ok {
			g.Deny(r, p, "admin action "+action+" not allowed", nil)
			WriteError(w, http.StatusForbidden, fmt.Sprintf("policy does not allow %s to %s", p, action))
			return
		}
		next(w, r, p)
	}
}

// ErrCertificateExpired refuses a certificate past its NotAfter on a
// connection opened while it was valid.
var ErrCertificateExpired = errors.New("client certificate expired: run limen login")

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
	if g.Now().After(r.TLS.VerifiedChains[0][0].NotAfter) {
		return identity.Principal{}, ErrCertificateExpired
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

// Deny records a refusal of r as auth.denied at the proxy, by p (zero when
// the caller is unknown), with optional details. The refusal stands whether
// or not it is recorded: refusing needs no audit trail.
func (g *Gate) Deny(r *http.Request, p identity.Principal, reason string, fields map[string]string) {
	_ = g.Emit(r, audit.Event{Type: audit.TypeAuthDenied, Principal: p, Fields: fields,
		Denied: &audit.Denied{Hop: audit.HopProxy, Reason: reason, Path: r.URL.Path}})
}
