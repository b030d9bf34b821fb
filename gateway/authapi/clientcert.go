package authapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/internal/apihttp"
)

// PathClientCert exchanges the caller's command-line certificate for one
// bound to an application client (limen kube login CLUSTER --app NAME).
const PathClientCert = "/v1/client-certificate"

// ClientRegistry answers whether policy registers a client
// (data.limen.config.clients).
type ClientRegistry interface {
	Registered(ctx context.Context, client string) (bool, error)
}

// ClientCertRequest asks for a certificate bound to Client over the key of
// CSR.
type ClientCertRequest struct {
	Client string `json:"client"`
	CSR    string `json:"csr"`
}

// ClientCertResponse carries the client-bound certificate.
type ClientCertResponse struct {
	Certificate string             `json:"certificate"` // PEM, leaf only
	Principal   identity.Principal `json:"principal"`
	Expires     time.Time          `json:"expires"`
}

// ClientCert asks the proxy for a certificate bound to an application
// client; the HTTP client must present the kubectl certificate.
func (c *Client) ClientCert(ctx context.Context, req ClientCertRequest) (ClientCertResponse, error) {
	var out ClientCertResponse
	return out, c.Do(ctx, http.MethodPost, PathClientCert, req, &out)
}

// clientCert issues the caller, as the same principal and login, a
// certificate for another client. Only the command line's own credential
// may ask (an application's cannot mint another's), only for a client the
// policy registers other than kubectl and the console (whose credentials
// come from their own logins), and never for longer than the caller's
// certificate lives.
func (h *Handler) clientCert(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	var req ClientCertRequest
	if !apihttp.Decode(w, r, &req) {
		return
	}
	deny := func(code int, msg string) {
		h.api.Deny(r, p, audit.ActionLogin, "client certificate: "+msg, map[string]string{"client": clientField(req.Client)})
		apihttp.WriteError(w, code, msg)
	}
	if p.ClientID != identity.ClientKubectl {
		deny(http.StatusForbidden, fmt.Sprintf("only a limen login certificate (client kubectl) can ask for an application's; this one is for client %q", p.ClientID))
		return
	}
	if err := identity.ValidClient(req.Client); err != nil {
		apihttp.WriteError(w, http.StatusBadRequest, "client: "+err.Error())
		return
	}
	if req.Client == identity.ClientKubectl || req.Client == identity.ClientConsole {
		apihttp.WriteError(w, http.StatusBadRequest, fmt.Sprintf("client %q has its own login; --app names an application registered in policy", req.Client))
		return
	}
	if h.cfg.ClientRegistry == nil {
		apihttp.WriteError(w, http.StatusServiceUnavailable, "this proxy has no client registry: ask your operator")
		return
	}
	ok, err := h.cfg.ClientRegistry.Registered(r.Context(), req.Client)
	if err != nil {
		h.api.Logger.Error("client certificate: policy", "client", req.Client, "err", err)
		apihttp.WriteError(w, http.StatusServiceUnavailable, "policy unavailable: try again later")
		return
	}
	if !ok {
		deny(http.StatusForbidden, fmt.Sprintf("policy does not register the client %q: ask your Limen administrator", req.Client))
		return
	}
	csr, err := ca.ParseCSR([]byte(req.CSR))
	if err != nil {
		apihttp.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	left := time.Until(r.TLS.VerifiedChains[0][0].NotAfter)
	if h.cfg.Now != nil {
		left = r.TLS.VerifiedChains[0][0].NotAfter.Sub(h.cfg.Now())
	}
	if left <= 0 {
		apihttp.WriteError(w, http.StatusUnauthorized, "your certificate has expired: run limen login")
		return
	}
	app := p
	app.ClientID = req.Client
	cert, err := h.cfg.CA.IssueUser(csr.PublicKey, app, left)
	if err != nil {
		h.api.Logger.Error("client certificate: issue", "user", p.Name, "client", req.Client, "err", err)
		apihttp.WriteError(w, http.StatusInternalServerError, "could not issue a certificate")
		return
	}
	if h.api.Emit(r, audit.Event{Type: audit.TypeAuthLogin, Principal: app, Fields: map[string]string{
		"login_id": app.LoginID, "client": app.ClientID, "via": "client-certificate",
		"expires": cert.NotAfter.UTC().Format(time.RFC3339)}}) != nil {
		apihttp.WriteError(w, http.StatusServiceUnavailable, "audit unavailable: try again later")
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, ClientCertResponse{Certificate: string(ca.CertPEM(cert.Raw)), Principal: app, Expires: cert.NotAfter.UTC()})
}

// clientField is a client name fit for an audit field.
func clientField(s string) string {
	if identity.ValidClient(s) == nil {
		return s
	}
	return "(invalid client name)"
}
