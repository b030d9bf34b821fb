// Package adminapi is the proxy's admin API for session control under
// /v1/admin/: locking and unlocking users and bots, listing locks, listing
// live and recent sessions, and killing one. Every call needs an unexpired
// client certificate of a principal who is not locked and whom policy
// allows the action; lock, unlock, kill and refusals are audited. The proxy wires the effects on workers through the
// OnChange and OnKill hooks.
package adminapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/internal/apihttp"
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
type AdminPolicy = apihttp.AdminPolicy

// Config holds the handler's dependencies. LockStore, Locks, Sessions,
// Admin, Principal and Audit are required.
type Config struct {
	// LockStore keeps locks durably; Locks are the locks in force, which
	// OnChange keeps current. A locked caller is refused every call here,
	// unlocking themself included.
	LockStore LockStore
	Locks     *locks.Set
	Sessions  SessionRegistry
	Admin     AdminPolicy
	// Principal returns the caller's verified certificate principal
	// (ca.Authority.PrincipalFromRequest).
	Principal func(*http.Request) (identity.Principal, error)
	// Audit records user.lock, user.unlock, session.kill and refusals.
	Audit audit.Sink
	// OnChange runs after a lock change is stored and audited: apply it to
	// Locks and push it to every worker. Errors are the hook's to log; the
	// stored lock is the truth workers get on reconnect.
	OnChange func(ctx context.Context, c locks.Change)
	// OnKill runs after a session is killed on the proxy: push
	// sessions.KillMessage to the workers of info.Cluster.
	OnKill func(ctx context.Context, info sessions.Info, by identity.Principal)
	// RemoteKill, with several proxies on one store, asks the proxy that
	// relays session id to kill it, when it is not this one, and returns
	// the session as the directory lists it (ended, when the other proxy
	// confirmed in time); an error wrapping sessions.ErrNoLiveSession when
	// no proxy relays it live. Nil with one proxy.
	RemoteKill func(ctx context.Context, id string, by identity.Principal) (sessions.Info, error)
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
	api *apihttp.API
	// mu makes each lock change (store, audit, and undo on audit failure)
	// one step for SyncLocks.
	mu sync.Mutex
}

// New checks cfg and builds the handler.
func New(cfg Config) (*Handler, error) {
	switch {
	case cfg.LockStore == nil:
		return nil, errors.New("adminapi: lock store is required")
	case cfg.Sessions == nil:
		return nil, errors.New("adminapi: session registry is required")
	}
	api, err := apihttp.New("adminapi", apihttp.Gate{Principal: cfg.Principal, Locks: cfg.Locks,
		Policy: cfg.Admin, Audit: cfg.Audit, ClientAddr: cfg.ClientAddr, Now: cfg.Now, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, api: api}
	api.Admin("GET "+PathLocks, ActionLocksList, h.listLocks)
	api.Admin("POST "+PathLocks, ActionLock, h.lock)
	api.Admin("DELETE "+PathLocks+"/{kind}/{name}", ActionUnlock, h.unlock)
	api.Admin("GET "+PathSessions, ActionSessionsList, h.listSessions)
	api.Admin("POST "+PathSessions+"/{id}/kill", ActionSessionKill, h.kill)
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
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.api.ServeHTTP(w, r) }
