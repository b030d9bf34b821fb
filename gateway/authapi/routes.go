package authapi

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/internal/apihttp"
	"github.com/limenhq/limen/gateway/users"
)

// countLogin reports a password check's result to OnLogin.
func (h *Handler) countLogin(err error) {
	if h.cfg.OnLogin == nil {
		return
	}
	switch {
	case err == nil:
		h.cfg.OnLogin("ok")
	case errors.Is(err, users.ErrRateLimited):
		h.cfg.OnLogin("rate_limited")
	case errors.Is(err, users.ErrBadCredentials):
		h.cfg.OnLogin("bad_credentials")
	default:
		h.cfg.OnLogin("unavailable")
	}
}

func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	var req LoginRequest
	if !apihttp.Decode(w, r, &req) {
		return
	}
	csr, err := ca.ParseCSR([]byte(req.CSR))
	if err != nil {
		apihttp.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	var ttl time.Duration
	if req.TTL != "" {
		if ttl, err = time.ParseDuration(req.TTL); err != nil || ttl <= 0 {
			apihttp.WriteError(w, http.StatusBadRequest, "ttl: want a positive duration such as 1h")
			return
		}
	}
	u, err := h.cfg.Users.Authenticate(r.Context(), req.User, req.Password, h.api.ClientAddr(r))
	h.countLogin(err)
	switch {
	case errors.Is(err, users.ErrRateLimited):
		h.api.Deny(r, identity.Principal{}, audit.ActionLogin, "login: rate limited", map[string]string{"user": claimedUser(req.User)})
		w.Header().Set("Retry-After", strconv.Itoa(60))
		apihttp.WriteError(w, http.StatusTooManyRequests, err.Error())
		return
	case errors.Is(err, users.ErrBadCredentials):
		h.api.Deny(r, identity.Principal{}, audit.ActionLogin, "login: bad credentials", map[string]string{"user": claimedUser(req.User)})
		apihttp.WriteError(w, http.StatusUnauthorized, err.Error())
		return
	case err != nil:
		h.api.Logger.Error("login: user store failed", "err", err)
		apihttp.WriteError(w, http.StatusServiceUnavailable, "user store unavailable: try again later")
		return
	}
	// A password login is the command line's: its certificate names the
	// kubectl client (an application's comes from PathClientCert).
	p := identity.Principal{Kind: identity.KindUser, Name: u.Name, Traits: u.Traits, ClientID: identity.ClientKubectl, LoginID: newLoginID()}
	cert, err := h.cfg.CA.IssueUser(csr.PublicKey, p, ttl)
	if err != nil {
		h.api.Logger.Error("login: issue certificate", "user", u.Name, "err", err)
		apihttp.WriteError(w, http.StatusInternalServerError, "could not issue a certificate")
		return
	}
	if h.api.Emit(r, audit.Event{Type: audit.TypeAuthLogin, Principal: p, Fields: map[string]string{
		"login_id": p.LoginID, "expires": cert.NotAfter.UTC().Format(time.RFC3339)}}) != nil {
		apihttp.WriteError(w, http.StatusServiceUnavailable, "audit unavailable: try again later")
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, LoginResponse{Certificate: string(ca.CertPEM(cert.Raw)), CA: string(h.cfg.CA.RootPEM()),
		Principal: p, Expires: cert.NotAfter.UTC()})
}

func (h *Handler) whoami(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	apihttp.WriteJSON(w, http.StatusOK, WhoAmIResponse{Principal: p, Expires: r.TLS.VerifiedChains[0][0].NotAfter.UTC()})
}

func (h *Handler) clusters(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	names, err := h.cfg.Clusters.Clusters(r.Context(), p)
	if err != nil {
		h.api.Logger.Error("cluster policy evaluation failed", "principal", p.String(), "err", err)
		apihttp.WriteError(w, http.StatusServiceUnavailable, "policy unavailable: try again later")
		return
	}
	out := ClustersResponse{Clusters: []Cluster{}}
	for _, n := range names {
		c := Cluster{Name: n}
		if h.cfg.Workers != nil {
			c.Connected = h.cfg.Workers.Connected(n)
		}
		out.Clusters = append(out.Clusters, c)
	}
	apihttp.WriteJSON(w, http.StatusOK, out)
}

func (h *Handler) enroll(w http.ResponseWriter, r *http.Request) {
	var req enroll.Request
	if !apihttp.Decode(w, r, &req) {
		return
	}
	tok, err := enroll.ParseToken(req.Token)
	if err != nil {
		apihttp.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := ca.ValidClusterName(req.Cluster); err != nil {
		apihttp.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	csr, err := ca.ParseCSR([]byte(req.CSR))
	if err != nil {
		apihttp.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	// Check the key before spending the token.
	if err := ca.CheckPublicKey(csr.PublicKey); err != nil {
		apihttp.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := h.cfg.Tokens.Redeem(r.Context(), tok, req.Cluster, h.api.ClientAddr(r)); err != nil {
		status := http.StatusForbidden
		if !enroll.IsRefusal(err) {
			h.api.Logger.Error("enroll: token store failed", "err", err)
			status, err = http.StatusServiceUnavailable, errors.New("token store unavailable: try again later")
		}
		apihttp.WriteError(w, status, err.Error())
		return
	}
	cert, err := h.cfg.CA.IssueWorker(csr.PublicKey, req.Cluster)
	if err != nil {
		h.api.Logger.Error("enroll: issue worker certificate", "cluster", req.Cluster, "err", err)
		apihttp.WriteError(w, http.StatusInternalServerError, "could not issue a worker certificate")
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, enroll.Response{
		Certificate:    string(ca.CertPEM(cert.Raw, h.cfg.CA.WorkerIssuer().Raw)),
		CA:             string(h.cfg.CA.RootPEM()),
		GrantPublicKey: string(enroll.GrantPublicKeyPEM(h.cfg.CA.GrantPublicKey())),
	})
}

// claimedUser names the user a failed login claimed to be, for audit. A
// name no user could have is not echoed, so logs stay bounded and printable.
func claimedUser(name string) string {
	if identity.ValidName(name) != nil {
		return "(invalid name)"
	}
	return name
}
