// Package authapi is the proxy's identity API under /v1/: login, whoami,
// the clusters a caller may reach, worker enrollment, and the admin
// endpoints for local users and join tokens. Policy, the tunnel registry
// and audit are reached through the small interfaces below.
package authapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/limenhq/limen/gateway/auth"
	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/identity"
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
type AdminPolicy interface {
	AdminAllow(ctx context.Context, p identity.Principal, action string) (bool, error)
}

// Config holds the handler's dependencies. CA, Users, Tokens, Clusters and
// Admin are required.
type Config struct {
	CA       *auth.Authority
	Users    *users.Store
	Tokens   *enroll.TokenStore
	Clusters ClusterPolicy
	Workers  WorkerRegistry // nil: no worker is ever connected
	Admin    AdminPolicy
	// Auditor receives auth.login and admin events; nil logs them.
	Auditor auth.Auditor
	// Logger receives operational logs; nil means slog.Default().
	Logger *slog.Logger
	// ClientAddr extracts the client's address for rate limiting and audit;
	// nil uses the connection's remote IP. Set it when behind a trusted load
	// balancer.
	ClientAddr func(*http.Request) string
}

// Handler serves the identity API. Mount it at "/v1/".
type Handler struct {
	cfg Config
	mux *http.ServeMux
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
	case cfg.Admin == nil:
		return nil, errors.New("authapi: admin policy is required")
	}
	if cfg.Auditor == nil {
		cfg.Auditor = auth.SlogAuditor{Logger: cfg.Logger}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ClientAddr == nil {
		cfg.ClientAddr = remoteIP
	}
	h := &Handler{cfg: cfg, mux: http.NewServeMux()}
	h.mux.HandleFunc("POST "+PathLogin, h.login)
	h.mux.HandleFunc("POST "+PathEnroll, h.enroll)
	h.mux.HandleFunc("GET "+PathWhoAmI, h.authenticated(h.whoami))
	h.mux.HandleFunc("GET "+PathClusters, h.authenticated(h.clusters))
	h.mux.HandleFunc("GET "+PathUsers, h.admin(ActionUsersList, h.listUsers))
	h.mux.HandleFunc("POST "+PathUsers, h.admin(ActionUsersAdd, h.addUser))
	h.mux.HandleFunc("DELETE "+PathUsers+"/{name}", h.admin(ActionUsersRemove, h.removeUser))
	h.mux.HandleFunc("PUT "+PathUsers+"/{name}/password", h.admin(ActionUsersPasswd, h.setPassword))
	h.mux.HandleFunc("GET "+PathTokens, h.admin(ActionTokensList, h.listTokens))
	h.mux.HandleFunc("POST "+PathTokens, h.admin(ActionTokensCreate, h.createToken))
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such API endpoint: "+r.Method+" "+r.URL.Path)
	})
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	h.mux.ServeHTTP(w, r)
}

type principalHandler func(http.ResponseWriter, *http.Request, identity.Principal)

// authenticated requires a verified user or bot certificate.
func (h *Handler) authenticated(next principalHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := h.cfg.CA.PrincipalFromRequest(r)
		if err != nil {
			writeError(w, http.StatusUnauthorized, err.Error())
			return
		}
		next(w, r, p)
	}
}

// admin requires a certificate and the policy's consent for action.
func (h *Handler) admin(action string, next principalHandler) http.HandlerFunc {
	return h.authenticated(func(w http.ResponseWriter, r *http.Request, p identity.Principal) {
		ok, err := h.cfg.Admin.AdminAllow(r.Context(), p, action)
		if err != nil {
			h.cfg.Logger.Error("admin policy evaluation failed", "action", action, "principal", p.String(), "err", err)
			writeError(w, http.StatusServiceUnavailable, "policy unavailable: try again later")
			return
		}
		if !ok {
			h.audit(r, auth.Event{Type: "auth.denied", Actor: p.String(), Fields: map[string]string{"action": action}})
			writeError(w, http.StatusForbidden, fmt.Sprintf("policy does not allow %s to %s", p, action))
			return
		}
		next(w, r, p)
	})
}

// audit emits e with the client address; it reports whether the event was
// accepted.
func (h *Handler) audit(r *http.Request, e auth.Event) bool {
	if e.Fields == nil {
		e.Fields = map[string]string{}
	}
	e.Fields["addr"] = h.cfg.ClientAddr(r)
	if err := h.cfg.Auditor.Emit(r.Context(), e); err != nil {
		h.cfg.Logger.Error("audit event not accepted", "type", e.Type, "err", err)
		return false
	}
	return true
}

func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

const maxBody = 64 << 10

// decode reads a JSON body strictly: known fields only, one value, bounded.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "request body: "+err.Error())
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "request body: more than one JSON value")
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, ErrorResponse{Error: msg})
}

func newLoginID() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// ErrorFromResponse turns a non-2xx response into an error that carries the
// server's message.
func ErrorFromResponse(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	var e ErrorResponse
	if json.Unmarshal(data, &e) != nil || e.Error == "" {
		e.Error = strings.TrimSpace(string(data))
	}
	return &StatusError{Code: resp.StatusCode, Message: e.Error}
}

// StatusError is an error answer from the API.
type StatusError struct {
	Code    int
	Message string
}

// Error reports the status and the server's message.
func (e *StatusError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}
