// Package requestapi is the proxy's API for access requests under
// /v1/requests (gateway/requests holds the rules): make one, list, approve
// and deny them, see what may be requested on a cluster, and exchange the
// login certificate for one that carries the caller's approved requests
// (the kubectl plugin does, limen kube credentials).
//
// Every call needs an unexpired certificate of a principal who is not
// locked (apihttp.API.Authenticated); who may do what is the policy's word
// through gateway/requests, not data.limen.admin.
package requestapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/internal/apihttp"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/requests"
)

// Paths of the API.
const (
	PathRequests    = "/v1/requests"
	PathRequestable = "/v1/requests/requestable"
	PathCertificate = "/v1/requests/certificate"
	PathClusters    = "/v1/requests/clusters"
)

// Config holds the handler's dependencies; all are required but Logger,
// ClientAddr and Now.
type Config struct {
	Requests *requests.Service
	CA       *ca.Authority
	Locks    *locks.Set
	// Admin is only the apihttp gate's requirement: no call here is an
	// admin action.
	Admin apihttp.AdminPolicy
	Audit audit.Sink
	// Clusters are the cluster names the proxy knows (--clusters), among
	// which PathClusters lists those where the caller may request a role.
	Clusters []string
	// Logger, ClientAddr and Now as in apihttp.Gate.
	Logger     *slog.Logger
	ClientAddr func(*http.Request) string
	Now        func() time.Time
}

// Handler serves the access-request API.
type Handler struct {
	cfg Config
	api *apihttp.API
}

// New checks cfg and builds the handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Requests == nil || cfg.CA == nil {
		return nil, errors.New("requestapi: the request service and the CA are required")
	}
	api, err := apihttp.New("requestapi", apihttp.Gate{Principal: cfg.CA.PrincipalFromRequest, Locks: cfg.Locks,
		Policy: cfg.Admin, Audit: cfg.Audit, ClientAddr: cfg.ClientAddr, Now: cfg.Now, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, api: api}
	api.Authenticated("GET "+PathRequests, h.list)
	api.Authenticated("POST "+PathRequests, h.create)
	api.Authenticated("GET "+PathRequestable, h.requestable)
	api.Authenticated("POST "+PathCertificate, h.certificate)
	api.Authenticated("GET "+PathClusters, h.clusters)
	api.Authenticated("GET "+PathRequests+"/{id}", h.get)
	api.Authenticated("POST "+PathRequests+"/{id}/approve", h.approve)
	api.Authenticated("POST "+PathRequests+"/{id}/deny", h.deny)
	return h, nil
}

// Register mounts h on mux for PathRequests and everything under it.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.Handle(PathRequests, h)
	mux.Handle(PathRequests+"/", h)
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.api.ServeHTTP(w, r) }

// CreateRequest asks for Role on Cluster for Duration ("1h").
type CreateRequest struct {
	Role     string `json:"role"`
	Cluster  string `json:"cluster"`
	Duration string `json:"duration"`
	Reason   string `json:"reason,omitempty"`
}

// DecideRequest carries an approver's reason.
type DecideRequest struct {
	Reason string `json:"reason,omitempty"`
}

// RequestableResponse lists the roles the caller may request on Cluster.
type RequestableResponse struct {
	Cluster string                         `json:"cluster"`
	Roles   map[string]policy.RequestTerms `json:"roles"`
}

// CertificateRequest asks for a certificate over CSR's key that carries
// the caller's approved requests among IDs.
type CertificateRequest struct {
	CSR string   `json:"csr"`
	IDs []string `json:"ids"`
}

// CertificateResponse is the certificate (PEM, leaf only) and every one of
// the asked ids that the proxy knows as the caller's, with its state.
type CertificateResponse struct {
	Certificate string             `json:"certificate"`
	Requests    []requests.Request `json:"requests"`
	Expires     time.Time          `json:"expires"`
}

// firstParty refuses requests made through an application's credential:
// code running with a person's certificate for an application must not
// widen that person's access.
func (h *Handler) firstParty(w http.ResponseWriter, r *http.Request, p identity.Principal) bool {
	if p.ClientID == identity.ClientKubectl || p.ClientID == identity.ClientConsole {
		return true
	}
	h.api.Deny(r, p, audit.ActionAccess, "access request through client "+p.ClientID, nil)
	apihttp.WriteError(w, http.StatusForbidden, fmt.Sprintf("access requests are made with limen (client kubectl) or the console, not through client %q", p.ClientID))
	return false
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	if !h.firstParty(w, r, p) {
		return
	}
	var req CreateRequest
	if !apihttp.Decode(w, r, &req) {
		return
	}
	d, err := time.ParseDuration(req.Duration)
	if err != nil {
		apihttp.WriteError(w, http.StatusBadRequest, fmt.Sprintf("duration %q: want a duration such as 30m or 1h", req.Duration))
		return
	}
	out, err := h.cfg.Requests.Create(r.Context(), p, requests.Ask{Role: req.Role, Cluster: req.Cluster, Duration: d, Reason: req.Reason})
	if err != nil {
		writeErr(w, err)
		return
	}
	apihttp.WriteJSON(w, http.StatusCreated, out)
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	st := requests.State(r.URL.Query().Get("state"))
	switch st {
	case "", requests.StatePending, requests.StateApproved, requests.StateDenied, requests.StateExpired:
	default:
		apihttp.WriteError(w, http.StatusBadRequest, fmt.Sprintf("state %q: want pending, approved, denied or expired", st))
		return
	}
	out, err := h.cfg.Requests.List(r.Context(), p, requests.Filter{State: st})
	if err != nil {
		writeErr(w, err)
		return
	}
	if out == nil {
		out = []requests.Request{}
	}
	apihttp.WriteJSON(w, http.StatusOK, out)
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	out, err := h.cfg.Requests.Get(r.Context(), r.PathValue("id"))
	if err == nil && !out.Requester.Same(p) {
		// Someone else's request is shown only to who may decide it.
		var mine []requests.Request
		mine, err = h.cfg.Requests.List(r.Context(), p, requests.Filter{})
		found := false
		for _, m := range mine {
			found = found || m.ID == out.ID
		}
		if err == nil && !found {
			err = fmt.Errorf("%w: %q", requests.ErrNotFound, out.ID)
		}
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, out)
}

func (h *Handler) approve(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	h.decide(w, r, p, h.cfg.Requests.Approve)
}

func (h *Handler) deny(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	h.decide(w, r, p, h.cfg.Requests.Deny)
}

func (h *Handler) decide(w http.ResponseWriter, r *http.Request, p identity.Principal,
	fn func(context.Context, identity.Principal, string, string) (requests.Request, error)) {
	if !h.firstParty(w, r, p) {
		return
	}
	var req DecideRequest
	if !apihttp.Decode(w, r, &req) {
		return
	}
	out, err := fn(r.Context(), p, r.PathValue("id"), req.Reason)
	if err != nil {
		writeErr(w, err)
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, out)
}

func (h *Handler) requestable(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	cluster := r.URL.Query().Get("cluster")
	roles, err := h.cfg.Requests.Requestable(r.Context(), p, cluster)
	if err != nil {
		writeErr(w, err)
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, RequestableResponse{Cluster: cluster, Roles: roles})
}

// ClustersResponse names the clusters where the caller may request a role.
type ClustersResponse struct {
	Clusters []string `json:"clusters"`
}

func (h *Handler) clusters(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	out := ClustersResponse{Clusters: []string{}}
	for _, c := range h.cfg.Clusters {
		roles, err := h.cfg.Requests.Requestable(r.Context(), p, c)
		if errors.Is(err, requests.ErrInvalid) {
			continue
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		if len(roles) > 0 {
			out.Clusters = append(out.Clusters, c)
		}
	}
	apihttp.WriteJSON(w, http.StatusOK, out)
}

// certificate issues the caller, as the same principal and login, a
// certificate that carries its approved requests among the asked ids and
// lives no longer than the certificate it presents. Only the command
// line's own login certificate may ask.
func (h *Handler) certificate(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	var req CertificateRequest
	if !apihttp.Decode(w, r, &req) {
		return
	}
	if p.ClientID != identity.ClientKubectl {
		h.api.Deny(r, p, audit.ActionAccess, "request certificate through client "+p.ClientID, nil)
		apihttp.WriteError(w, http.StatusForbidden, fmt.Sprintf("only a limen login certificate (client kubectl) can carry access requests; this one is for client %q", p.ClientID))
		return
	}
	csr, err := ca.ParseCSR([]byte(req.CSR))
	if err != nil {
		apihttp.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	base := p.WithoutRequests()
	els, known, err := h.cfg.Requests.Credential(r.Context(), base, req.IDs)
	if err != nil {
		writeErr(w, err)
		return
	}
	left := r.TLS.VerifiedChains[0][0].NotAfter.Sub(h.api.Now())
	if left <= 0 {
		apihttp.WriteError(w, http.StatusUnauthorized, "your certificate has expired: run limen login")
		return
	}
	next := base
	next.Requests = els
	cert, err := h.cfg.CA.IssueUser(csr.PublicKey, next, left)
	if err != nil {
		h.api.Logger.Error("request certificate: issue", "user", p.String(), "err", err)
		apihttp.WriteError(w, http.StatusInternalServerError, "could not issue a certificate")
		return
	}
	if len(els) > 0 {
		ids := ""
		for i, e := range els {
			if i > 0 {
				ids += ","
			}
			ids += e.Request
		}
		if h.api.Emit(r, audit.Event{Type: audit.TypeAuthLogin, Principal: next, Fields: map[string]string{
			"login_id": next.LoginID, "via": "access-request", "requests": ids,
			"expires": cert.NotAfter.UTC().Format(time.RFC3339)}}) != nil {
			apihttp.WriteError(w, http.StatusServiceUnavailable, "audit unavailable: try again later")
			return
		}
	}
	if known == nil {
		known = []requests.Request{}
	}
	apihttp.WriteJSON(w, http.StatusOK, CertificateResponse{Certificate: string(ca.CertPEM(cert.Raw)), Requests: known, Expires: cert.NotAfter.UTC()})
}

// writeErr answers a service error with its status.
func writeErr(w http.ResponseWriter, err error) {
	code := http.StatusServiceUnavailable
	switch {
	case errors.Is(err, requests.ErrInvalid):
		code = http.StatusBadRequest
	case errors.Is(err, requests.ErrRefused):
		code = http.StatusForbidden
	case errors.Is(err, requests.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, requests.ErrConflict):
		code = http.StatusConflict
	}
	apihttp.WriteError(w, code, err.Error())
}

// Client calls the access-request API.
type Client struct{ apihttp.Client }

// Create makes an access request.
func (c *Client) Create(ctx context.Context, req CreateRequest) (requests.Request, error) {
	var out requests.Request
	return out, c.Do(ctx, http.MethodPost, PathRequests, req, &out)
}

// List lists the caller's requests and those the caller may decide.
func (c *Client) List(ctx context.Context, state string) ([]requests.Request, error) {
	var out []requests.Request
	path := PathRequests
	if state != "" {
		path += "?state=" + url.QueryEscape(state)
	}
	return out, c.Do(ctx, http.MethodGet, path, nil, &out)
}

// Approve approves request id.
func (c *Client) Approve(ctx context.Context, id, reason string) (requests.Request, error) {
	var out requests.Request
	return out, c.Do(ctx, http.MethodPost, PathRequests+"/"+url.PathEscape(id)+"/approve", DecideRequest{Reason: reason}, &out)
}

// Deny denies request id.
func (c *Client) Deny(ctx context.Context, id, reason string) (requests.Request, error) {
	var out requests.Request
	return out, c.Do(ctx, http.MethodPost, PathRequests+"/"+url.PathEscape(id)+"/deny", DecideRequest{Reason: reason}, &out)
}

// Requestable lists what the caller may request on cluster.
func (c *Client) Requestable(ctx context.Context, cluster string) (RequestableResponse, error) {
	var out RequestableResponse
	return out, c.Do(ctx, http.MethodGet, PathRequestable+"?cluster="+url.QueryEscape(cluster), nil, &out)
}

// Clusters names the clusters where the caller may request a role.
func (c *Client) Clusters(ctx context.Context) ([]string, error) {
	var out ClustersResponse
	return out.Clusters, c.Do(ctx, http.MethodGet, PathClusters, nil, &out)
}

// Certificate exchanges the presented login certificate for one carrying
// the caller's approved requests among ids.
func (c *Client) Certificate(ctx context.Context, req CertificateRequest) (CertificateResponse, error) {
	var out CertificateResponse
	return out, c.Do(ctx, http.MethodPost, PathCertificate, req, &out)
}
