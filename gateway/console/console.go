// Package console is the web console under /console/ on the proxy's port
// (DESIGN.md §7a): sign-in with a local user and password, and pages for
// sessions (with kill and a live read-only view), recordings (played with
// the vendored asciinema-player), audit search, locks, policy status and
// "what may I do". Pages are server-rendered with html/template; the little
// JavaScript there is lives in assets/ (no inline script: the CSP forbids
// it).
//
// The console is client "console": every signed-in principal carries
// ClientID "console", and every page is authorized through
// data.limen.admin.allow with the Action… names below. Users see their own
// sessions and recordings; the all-seeing actions are for admins.
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/limenhq/limen/gateway/adminapi"
	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/internal/apihttp"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/store"
	"github.com/limenhq/limen/gateway/users"
)

// ClientID is the client every console credential names (DESIGN.md §6).
const ClientID = "console"

// Prefix is where the proxy mounts the console.
const Prefix = "/console/"

// Actions the console asks data.limen.admin.allow about. The first three
// are the self-service pages every user may open (policies/admin.rego);
// the rest widen them to everyone's, or are admin pages and controls.
const (
	ActionSessions   = "console.sessions"
	ActionRecordings = "console.recordings"
	ActionAccess     = "console.access"
	// ActionSessionsAll shows everyone's sessions (the admin API's
	// sessions.list); ActionRecordingsAll everyone's recordings.
	ActionSessionsAll   = adminapi.ActionSessionsList
	ActionRecordingsAll = "recordings.list"
	ActionKill          = adminapi.ActionSessionKill
	ActionObserve       = "session.observe"
	ActionAudit         = "audit.search"
	ActionLocks         = adminapi.ActionLocksList
	ActionLock          = adminapi.ActionLock
	ActionUnlock        = adminapi.ActionUnlock
	ActionPolicy        = "policy.status"
	// ActionRequests opens the Requests page (requests.go): every user
	// may; policies/requests.rego decides who approves what.
	ActionRequests = "console.requests"
)

// TypeSessionObserve is the audit event of a live view being opened.
const TypeSessionObserve audit.Type = "session.observe"

// DefaultSessionTTL is how long a console sign-in lasts.
const DefaultSessionTTL = 30 * time.Minute

// UserStore checks passwords and tells whether a user still exists
// (*users.Store).
type UserStore interface {
	Authenticate(ctx context.Context, name, password, addr string) (users.User, error)
	Get(ctx context.Context, name string) (users.User, error)
}

// AuditStore is the audit trail: events are recorded and searched
// (*audit.Store behind the proxy's aggregator for Emit).
type AuditStore interface {
	Search(ctx context.Context, q audit.Query) ([]audit.Event, error)
	SessionStart(ctx context.Context, id string) (audit.Event, bool, error)
	SessionEnd(ctx context.Context, id string) (audit.Event, bool, error)
}

// RecordingStore holds the uploaded recordings (*recstore.Store).
type RecordingStore interface {
	List() ([]recstore.Info, error)
	Open(id string) (io.ReadSeekCloser, recstore.Info, error)
}

// SessionRegistry is the proxy's live and recent sessions
// (*sessions.Registry).
type SessionRegistry interface {
	List() []sessions.Info
	Get(id string) (sessions.Info, bool)
}

// Control makes the admin API's changes on behalf of a console user whom
// the console has authorized (*adminapi.Handler): same rules, same audit.
type Control interface {
	Kill(r *http.Request, by identity.Principal, id string) (sessions.Info, int, error)
	Lock(r *http.Request, by identity.Principal, req adminapi.LockRequest) (locks.Lock, int, error)
	Unlock(r *http.Request, by identity.Principal, t locks.Target) (locks.Lock, int, error)
}

// PolicyHop is the policy status of one hop: this proxy, or a connected
// worker.
type PolicyHop struct {
	// Hop is "proxy" or "worker"; Name the proxy's or the worker's ID and
	// Cluster the worker's cluster.
	Hop, Name, Cluster string
	Status             policy.Status
	// Err says why the hop's status is not known (a worker that did not
	// answer).
	Err string
}

// Config holds the console's dependencies. Users, Admin, Locks, Audit,
// Events, Recordings, Sessions and Control are required.
type Config struct {
	Users UserStore
	Admin apihttp.AdminPolicy
	// Locks are the locks in force: a locked user is refused on the next
	// request, signed in or not.
	Locks *locks.Set
	// Audit records sign-ins, refusals and session.observe.
	Audit      audit.Sink
	Events     AuditStore
	Recordings RecordingStore
	Sessions   SessionRegistry
	Control    Control
	// PolicyStatus reports the policy of this proxy and of each connected
	// worker; nil shows only that it is not wired.
	PolicyStatus func(ctx context.Context) []PolicyHop
	// Observe streams the recording of live session s as it is written
	// (asciicast v3: header, then events), ending when the session ends;
	// nil turns the live view off.
	Observe func(ctx context.Context, s sessions.Info) (io.ReadCloser, error)
	// Access answers "what may I do" (#13's three answers); nil says the
	// computation is not wired into this proxy yet.
	Access AccessFunc
	// Requests are the access requests, for the Requests page; nil
	// leaves the page out.
	Requests RequestService
	// Clusters lists the clusters p may reach, to offer on the "what may I
	// do" page; nil offers none.
	Clusters func(ctx context.Context, p identity.Principal) ([]string, error)
	// OIDC, when set, offers sign-in through the proxy's identity provider:
	// it returns the provider's code flow back to a redirect URL (the
	// console's /console/oidc/callback). Nil offers the password form only.
	OIDC func(redirectURL string) OIDCFlow
	// OIDCRedirectURL is where the identity provider sends the browser
	// back (https://PROXY/console/oidc/callback, registered at the
	// provider); required with OIDC.
	OIDCRedirectURL string
	// SignIns keeps the sign-ins (shared by the proxies of one database);
	// nil keeps them in memory.
	SignIns store.SignIns
	// SessionTTL bounds a sign-in; 0 is DefaultSessionTTL.
	SessionTTL time.Duration
	// ClientAddr extracts the client's address for rate limiting and
	// audit; nil uses the connection's remote IP.
	ClientAddr func(*http.Request) string
	Now        func() time.Time
	Logger     *slog.Logger
}

//go:embed assets templates
var files embed.FS

// Handler serves the console. Mount it at Prefix.
type Handler struct {
	cfg      Config
	mux      *http.ServeMux
	sessions signins
	pages    *pages
	assets   http.Handler
}

// New checks cfg and builds the console.
func New(cfg Config) (*Handler, error) {
	switch {
	case cfg.Users == nil:
		return nil, errors.New("console: user store is required")
	case cfg.Admin == nil:
		return nil, errors.New("console: admin policy is required")
	case cfg.Locks == nil:
		return nil, errors.New("console: lock set is required")
	case cfg.Audit == nil || cfg.Events == nil:
		return nil, errors.New("console: audit trail is required")
	case cfg.Recordings == nil:
		return nil, errors.New("console: recording store is required")
	case cfg.Sessions == nil || cfg.Control == nil:
		return nil, errors.New("console: session registry and control are required")
	}
	if cfg.OIDC != nil {
		if err := ValidOIDCRedirectURL(cfg.OIDCRedirectURL); err != nil {
			return nil, fmt.Errorf("console: OIDC redirect URL: %w", err)
		}
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.ClientAddr == nil {
		cfg.ClientAddr = apihttp.RemoteIP
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SignIns == nil {
		cfg.SignIns = store.NewMemorySignIns()
	}
	pg, err := parsePages()
	if err != nil {
		return nil, err
	}
	sub, err := fs.Sub(files, "assets")
	if err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, mux: http.NewServeMux(), sessions: signins{cfg.SignIns}, pages: pg,
		assets: http.StripPrefix(Prefix+"assets/", http.FileServerFS(sub))}
	h.routes()
	return h, nil
}

// csp is every page's Content-Security-Policy: nothing from another origin,
// no inline script or style, never framed.
const csp = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// cspPlayer is the recording page's: the same, and WebAssembly, which
// asciinema-player's terminal emulator is compiled to. 'wasm-unsafe-eval'
// lets a page compile WebAssembly modules; it allows no JavaScript eval and
// no inline script, and the module comes from the vendored player itself.
const cspPlayer = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// ServeHTTP implements http.Handler: every answer carries the console's
// security headers.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	// No inline script or style, nothing from another origin, never framed.
	hd.Set("Content-Security-Policy", csp)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) routes() {
	m := h.mux
	m.Handle("GET "+Prefix+"assets/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.assets.ServeHTTP(w, r)
	}))
	m.HandleFunc("GET "+Prefix+"signin", h.signinPage)
	m.HandleFunc("POST "+Prefix+"signin", h.signin)
	m.HandleFunc("POST "+Prefix+"signout", h.user(h.signout))
	if h.cfg.OIDC != nil {
		m.HandleFunc("GET "+Prefix+"oidc", h.oidcStart)
		m.HandleFunc("GET "+callbackPath, h.oidcCallback)
	}
	m.HandleFunc("GET "+Prefix+"{$}", h.user(func(w http.ResponseWriter, r *http.Request, s *signin) {
		http.Redirect(w, r, Prefix+"sessions", http.StatusSeeOther)
	}))
	m.HandleFunc("GET "+Prefix+"sessions", h.page(ActionSessions, h.sessionsPage))
	m.HandleFunc("GET "+Prefix+"api/sessions", h.page(ActionSessions, h.sessionsJSON))
	m.HandleFunc("POST "+Prefix+"sessions/{id}/kill", h.page(ActionKill, h.kill))
	m.HandleFunc("GET "+Prefix+"sessions/{id}/live", h.page(ActionObserve, h.livePage))
	m.HandleFunc("GET "+Prefix+"sessions/{id}/live.ws", h.page(ActionObserve, h.liveSocket))
	m.HandleFunc("GET "+Prefix+"recordings", h.page(ActionRecordings, h.recordingsPage))
	m.HandleFunc("GET "+Prefix+"api/recordings", h.page(ActionRecordings, h.recordingsJSON))
	m.HandleFunc("GET "+Prefix+"recordings/{id}", h.page(ActionRecordings, h.recordingPage))
	m.HandleFunc("GET "+Prefix+"api/recordings/{id}", h.page(ActionRecordings, h.recordingCast))
	m.HandleFunc("GET "+Prefix+"audit", h.page(ActionAudit, h.auditPage))
	m.HandleFunc("GET "+Prefix+"api/audit", h.page(ActionAudit, h.auditJSON))
	m.HandleFunc("GET "+Prefix+"locks", h.page(ActionLocks, h.locksPage))
	m.HandleFunc("POST "+Prefix+"locks", h.page(ActionLock, h.lock))
	m.HandleFunc("POST "+Prefix+"locks/{kind}/{name}/unlock", h.page(ActionUnlock, h.unlock))
	m.HandleFunc("GET "+Prefix+"policy", h.page(ActionPolicy, h.policyPage))
	m.HandleFunc("GET "+Prefix+"access", h.page(ActionAccess, h.accessPage))
	if h.cfg.Requests != nil {
		m.HandleFunc("GET "+Prefix+"requests", h.page(ActionRequests, h.requestsPage))
		m.HandleFunc("POST "+Prefix+"requests/{id}/{verb}", h.page(ActionRequests, h.decideRequest))
	}
	m.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, nil, http.StatusNotFound, "no such console page")
	})
}
