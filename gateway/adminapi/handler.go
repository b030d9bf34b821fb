// Package adminapi is the proxy's admin API for session control under
// /v1/admin/: locking and unlocking users and bots, listing locks, listing
// live and recent sessions, and killing one. Every call needs a client
// certificate whose principal policy allows the action; lock, unlock and
// kill are audited. The proxy wires the effects on workers through the
// OnChange and OnKill hooks.
package adminapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/sessions"
)

// LockStore keeps locks durably (*locks.Store).
type LockStore interface {
	Add(ctx context.Context, l locks.Lock) error
	Remove(ctx context.Context, t locks.Target, now time.Time) (locks.Lock, error)
	List(ctx context.Context, now time.Time) ([]locks.Lock, error)
}

// SessionRegistry is the proxy's live sessions (*sessions.Registry).
type SessionRegistry interface {
	List() []sessions.Info
	Get(id string) (sessions.Info, bool)
	Kill(id string) bool
}

// AdminPolicy authorizes admin actions (data.limen.admin.allow).
type AdminPolicy interface {
	AdminAllow(ctx context.Context, p identity.Principal, action string) (bool, error)
}

// Config holds the handler's dependencies. Locks, Sessions, Admin,
// Principal and Audit are required.
type Config struct {
	Locks    LockStore
	Sessions SessionRegistry
	Admin    AdminPolicy
	// Principal returns the caller's verified certificate principal
	// (auth.Authority.PrincipalFromRequest).
	Principal func(*http.Request) (identity.Principal, error)
	// Audit records user.lock, user.unlock and session.kill.
	Audit audit.Sink
	// OnChange runs after a lock change is stored and audited: apply it to
	// the proxy's locks.Set and push it to every worker. Errors are the
	// hook's to log; the stored lock is the truth workers get on reconnect.
	OnChange func(ctx context.Context, c locks.Change)
	// OnKill runs after a session is killed on the proxy: push
	// sessions.KillMessage to the workers of info.Cluster.
	OnKill func(ctx context.Context, info sessions.Info, by identity.Principal)
	// Logger receives operational logs; nil means slog.Default().
	Logger *slog.Logger
	// ClientAddr extracts the caller's address for audit; nil uses the
	// connection's remote IP.
	ClientAddr func(*http.Request) string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Handler serves the session-control admin API.
type Handler struct {
	cfg Config
	mux *http.ServeMux
}

// New checks cfg and builds the handler.
func New(cfg Config) (*Handler, error) {
	switch {
	case cfg.Locks == nil:
		return nil, errors.New("adminapi: lock store is required")
	case cfg.Sessions == nil:
		return nil, errors.New("adminapi: session registry is required")
	case cfg.Admin == nil:
		return nil, errors.New("adminapi: admin policy is required")
	case cfg.Principal == nil:
		return nil, errors.New("adminapi: principal function is required")
	case cfg.Audit == nil:
		return nil, errors.New("adminapi: audit sink is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ClientAddr == nil {
		cfg.ClientAddr = remoteIP
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &Handler{cfg: cfg, mux: http.NewServeMux()}
	h.mux.HandleFunc("GET "+PathLocks, h.admin(ActionLocksList, h.listLocks))
	h.mux.HandleFunc("POST "+PathLocks, h.admin(ActionLock, h.lock))
	h.mux.HandleFunc("DELETE "+PathLocks+"/{kind}/{name}", h.admin(ActionUnlock, h.unlock))
	h.mux.HandleFunc("GET "+PathSessions, h.admin(ActionSessionsList, h.listSessions))
	h.mux.HandleFunc("POST "+PathSessions+"/{id}/kill", h.admin(ActionSessionKill, h.kill))
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such API endpoint: "+r.Method+" "+r.URL.Path)
	})
	return h, nil
}

// Register mounts h on mux for PathLocks and PathSessions and everything
// under them; more specific than the identity API's "/v1/", these win.
func (h *Handler) Register(mux *http.ServeMux) {
	for _, p := range []string{PathLocks, PathLocks + "/", PathSessions, PathSessions + "/"} {
		mux.Handle(p, h)
	}
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	h.mux.ServeHTTP(w, r)
}

type principalHandler func(http.ResponseWriter, *http.Request, identity.Principal)

// admin requires a certificate and the policy's consent for action.
func (h *Handler) admin(action string, next principalHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := h.cfg.Principal(r)
		if err != nil {
			writeError(w, http.StatusUnauthorized, err.Error()+": run limen login")
			return
		}
		ok, err := h.cfg.Admin.AdminAllow(r.Context(), p, action)
		if err != nil {
			h.cfg.Logger.Error("admin policy evaluation failed", "action", action, "principal", p.String(), "err", err)
			writeError(w, http.StatusServiceUnavailable, "policy unavailable: try again later")
			return
		}
		if !ok {
			h.emit(r, audit.Event{Type: audit.TypeAuthDenied, Principal: p,
				Denied: &audit.Denied{Hop: audit.HopProxy, Reason: "admin action " + action + " not allowed", Path: r.URL.Path}})
			writeError(w, http.StatusForbidden, fmt.Sprintf("policy does not allow %s to %s", p, action))
			return
		}
		next(w, r, p)
	}
}

// emit records e with the time and client address filled in.
func (h *Handler) emit(r *http.Request, e audit.Event) error {
	e.Time = h.cfg.Now()
	e.ClientAddr = h.cfg.ClientAddr(r)
	if err := h.cfg.Audit.Emit(r.Context(), e); err != nil {
		h.cfg.Logger.Error("audit event not recorded", "type", e.Type, "err", err)
		return err
	}
	return nil
}

func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

const maxBody = 16 << 10

// decodeBody reads a JSON body strictly: known fields only, one value,
// bounded.
func decodeBody(r io.Reader, v any) error {
	dec := json.NewDecoder(io.LimitReader(r, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	if dec.More() {
		return errors.New("request body: more than one JSON value")
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// ErrorResponse is the body of every non-2xx answer.
type ErrorResponse struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, ErrorResponse{Error: msg})
}
