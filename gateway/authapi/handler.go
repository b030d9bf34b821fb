// Package authapi is the proxy's identity API under /v1/: login, whoami,
// the clusters a caller may reach, worker enrollment, and the admin
// endpoints for local users and join tokens. Policy, the tunnel registry
// and audit are reached through the small interfaces below; the caller
// checks, body rules and error answers are gateway/internal/apihttp's.
package authapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/bots"
	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/internal/apihttp"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/oidc"
	"github.com/limenhq/limen/gateway/users"
)

// ClusterPolicy answers which clusters policy lets a principal reach
// (data.limen.kube.clusters).
type ClusterPolicy interface {
	Clusters(ctx context.Context, p identity.Principal) ([]string, error)
}

// WorkerRegistry answers whether a worker for a cluster is connected.
type WorkerRegistry interface {
	Connected(cluster string) bool
}

// AdminPolicy authorizes admin actions (data.limen.admin.allow).
type AdminPolicy = apihttp.AdminPolicy

// Config holds the handler's dependencies. CA, Users, Tokens, Clusters,
// Admin, Locks and Audit are required.
type Config struct {
	CA       *ca.Authority
	Users    *users.Store
	Tokens   *enroll.TokenStore
	Clusters ClusterPolicy
	Workers  WorkerRegistry // nil: no worker is ever connected
	Admin    AdminPolicy
	// Locks are the locks in force; a locked caller is refused the admin
	// endpoints.
	Locks *locks.Set
	// Audit records logins, refusals and admin changes.
	Audit audit.Sink
	// Logger receives operational logs; nil means slog.Default().
	Logger *slog.Logger
	// ClientAddr extracts the client's address for rate limiting and audit;
	// nil uses the connection's remote IP. Set it when behind a trusted load
	// balancer.
	ClientAddr func(*http.Request) string
	// Now is the clock for the caller checks; nil means time.Now.
	Now func() time.Time
	// ClientRegistry says which application clients policy registers, for
	// PathClientCert; nil refuses that endpoint with 503.
	ClientRegistry ClientRegistry
	// OnLogin, if set, is told of each password login's result: "ok",
	// "bad_credentials", "rate_limited" or "unavailable" (metrics).
	OnLogin func(result string)
	// OIDC, when set, signs people in through an OpenID Connect provider
	// (oidc.go).
	OIDC *oidc.Provider
	// Bots, when set, serves bot logins and the bot admin endpoints; CI
	// lists the trusted CI issuers for keyless bot logins and BotPolicy
	// matches their tokens to bots (bots.go).
	Bots      *bots.Store
	CI        []CIIssuer
	BotPolicy BotPolicy
	// Replay remembers the CI tokens that logged in, so that none logs in
	// twice; nil is a bots.NewReplayCache of the default size.
	Replay bots.Replays
}

// Handler serves the identity API. Mount it at "/v1/".
type Handler struct {
	cfg Config
	api *apihttp.API
}

// New checks cfg and builds the handler.
func New(cfg Config) (*Handler, error) {
	switch {
	case cfg.CA == nil:
		return nil, errors.New("authapi: CA is required")
	case cfg.Users == nil:
		return nil, errors.New("authapi: user store is required")
	case cfg.Tokens == nil:
		return nil, errors.New("authapi: token store is required")
	case cfg.Clusters == nil:
		return nil, errors.New("authapi: cluster policy is required")
	}
	api, err := apihttp.New("authapi", apihttp.Gate{Principal: cfg.CA.PrincipalFromRequest, Locks: cfg.Locks,
		Policy: cfg.Admin, Audit: cfg.Audit, ClientAddr: cfg.ClientAddr, Now: cfg.Now, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	if cfg.Replay == nil {
		cfg.Replay = bots.NewReplayCache(0)
	}
	h := &Handler{cfg: cfg, api: api}
	api.Public("POST "+PathLogin, h.login)
	api.Public("POST "+PathEnroll, h.enroll)
	api.Authenticated("GET "+PathWhoAmI, h.whoami)
	api.Authenticated("GET "+PathClusters, h.clusters)
	api.Authenticated("POST "+PathClientCert, h.clientCert)
	api.Admin("GET "+PathUsers, ActionUsersList, h.listUsers)
	api.Admin("POST "+PathUsers, ActionUsersAdd, h.addUser)
	api.Admin("DELETE "+PathUsers+"/{name}", ActionUsersRemove, h.removeUser)
	api.Admin("PUT "+PathUsers+"/{name}/password", ActionUsersPasswd, h.setPassword)
	api.Admin("GET "+PathTokens, ActionTokensList, h.listTokens)
	api.Admin("POST "+PathTokens, ActionTokensCreate, h.createToken)
	h.mountOIDC()
	if err := h.mountBots(); err != nil {
		return nil, err
	}
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.api.ServeHTTP(w, r) }

// StatusError is an error answer from the API.
type StatusError = apihttp.StatusError

func newLoginID() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}
