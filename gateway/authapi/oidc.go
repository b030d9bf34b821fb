package authapi

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/internal/apihttp"
	"github.com/limenhq/limen/gateway/oidc"
)

// Paths of the OIDC sign-in.
const (
	PathOIDCURL         = "/v1/login/oidc/url"
	PathOIDCLogin       = "/v1/login/oidc"
	PathOIDCDevice      = "/v1/login/oidc/device"
	PathOIDCDeviceToken = "/v1/login/oidc/device/token"
)

// OIDCURLRequest asks for the provider's authorization URL. The client
// made state, nonce and the PKCE verifier; only the verifier's S256
// challenge is sent now, the verifier itself only with the code.
type OIDCURLRequest struct {
	RedirectURI   string `json:"redirect_uri"`
	State         string `json:"state"`
	Nonce         string `json:"nonce"`
	CodeChallenge string `json:"code_challenge"`
}

// OIDCURLResponse is where to send the browser.
type OIDCURLResponse struct {
	URL string `json:"url"`
}

// OIDCLoginRequest redeems the code the loopback listener received.
type OIDCLoginRequest struct {
	RedirectURI  string `json:"redirect_uri"`
	Code         string `json:"code"`
	CodeVerifier string `json:"code_verifier"`
	Nonce        string `json:"nonce"`
	CSR          string `json:"csr"`
	TTL          string `json:"ttl,omitempty"`
}

// DeviceResponse starts a device login: show UserCode and
// VerificationURI, then poll PathOIDCDeviceToken with DeviceCode.
type DeviceResponse struct {
	DeviceCode              string    `json:"device_code"`
	UserCode                string    `json:"user_code"`
	VerificationURI         string    `json:"verification_uri"`
	VerificationURIComplete string    `json:"verification_uri_complete,omitempty"`
	Interval                int64     `json:"interval"`
	Expires                 time.Time `json:"expires"`
}

// DeviceTokenRequest asks whether the device code was approved.
type DeviceTokenRequest struct {
	DeviceCode string `json:"device_code"`
	Interval   int64  `json:"interval,omitempty"`
	CSR        string `json:"csr"`
	TTL        string `json:"ttl,omitempty"`
}

// DeviceTokenResponse is Pending until the user approved, then the login.
type DeviceTokenResponse struct {
	Pending bool           `json:"pending,omitempty"`
	Login   *LoginResponse `json:"login,omitempty"`
}

// devicePoll is how long one device-token call waits at the provider
// before answering pending.
const devicePoll = 10 * time.Second

func (h *Handler) mountOIDC() {
	if h.cfg.OIDC == nil {
		return
	}
	h.api.Public("POST "+PathOIDCURL, h.oidcURL)
	h.api.Public("POST "+PathOIDCLogin, h.oidcLogin)
	h.api.Public("POST "+PathOIDCDevice, h.oidcDevice)
	h.api.Public("POST "+PathOIDCDeviceToken, h.oidcDeviceToken)
}

// loopback checks a CLI redirect URI: http on a loopback address with a
// port, path /callback (RFC 8252). Other URIs are the console's, which
// builds its Flow itself.
func loopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Path != "/callback" || u.RawQuery != "" || u.Port() == "" {
		return errors.New("redirect_uri: want http://127.0.0.1:PORT/callback (the CLI's loopback listener)")
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		return errors.New("redirect_uri: the host must be a loopback address")
	}
	return nil
}

func (h *Handler) oidcURL(w http.ResponseWriter, r *http.Request) {
	var req OIDCURLRequest
	if !apihttp.Decode(w, r, &req) {
		return
	}
	if err := loopback(req.RedirectURI); err != nil {
		apihttp.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if len(req.State) < 16 || len(req.Nonce) < 16 || len(req.CodeChallenge) != 43 {
		apihttp.WriteError(w, http.StatusBadRequest, "state and nonce (16+ characters) and an S256 code_challenge are required")
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, OIDCURLResponse{
		URL: h.cfg.OIDC.Flow(req.RedirectURI).AuthCodeURLChallenge(req.State, req.Nonce, req.CodeChallenge)})
}

func (h *Handler) oidcLogin(w http.ResponseWriter, r *http.Request) {
	var req OIDCLoginRequest
	if !apihttp.Decode(w, r, &req) {
		return
	}
	csr, ttl, ok := parseCSRAndTTL(w, req.CSR, req.TTL)
	if !ok {
		return
	}
	if err := loopback(req.RedirectURI); err != nil {
		apihttp.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	p, err := h.cfg.OIDC.Flow(req.RedirectURI).Exchange(r.Context(), req.Code, req.CodeVerifier, req.Nonce)
	if err != nil {
		h.oidcRefused(w, r, err)
		return
	}
	p.ClientID = identity.ClientKubectl // limen login --oidc: the command line's
	h.issue(w, r, csr, ttl, p, "oidc", time.Time{})
}

func (h *Handler) oidcDevice(w http.ResponseWriter, r *http.Request) {
	da, err := h.cfg.OIDC.DeviceAuth(r.Context())
	if err != nil {
		h.api.Logger.Error("oidc: device authorization", "err", err)
		apihttp.WriteError(w, http.StatusBadGateway, "the identity provider refused to start a device login: "+err.Error())
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, DeviceResponse{DeviceCode: da.DeviceCode, UserCode: da.UserCode,
		VerificationURI: da.VerificationURI, VerificationURIComplete: da.VerificationURIComplete,
		Interval: da.Interval, Expires: da.Expiry.UTC()})
}

func (h *Handler) oidcDeviceToken(w http.ResponseWriter, r *http.Request) {
	var req DeviceTokenRequest
	if !apihttp.Decode(w, r, &req) {
		return
	}
	csr, ttl, ok := parseCSRAndTTL(w, req.CSR, req.TTL)
	if !ok {
		return
	}
	interval := max(time.Duration(req.Interval)*time.Second, time.Second)
	ctx, cancel := context.WithTimeout(r.Context(), devicePoll)
	defer cancel()
	p, err := h.cfg.OIDC.DeviceToken(ctx, req.DeviceCode, interval)
	if errors.Is(err, oidc.ErrPending) {
		apihttp.WriteJSON(w, http.StatusOK, DeviceTokenResponse{Pending: true})
		return
	}
	if err != nil {
		h.oidcRefused(w, r, err)
		return
	}
	p.ClientID = identity.ClientKubectl // limen login --oidc --device: the command line's
	resp, ok := h.issue(nil, r, csr, ttl, p, "oidc-device", time.Time{})
	if !ok {
		apihttp.WriteError(w, http.StatusServiceUnavailable, "could not issue and audit the certificate: try again later")
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, DeviceTokenResponse{Login: resp})
}

// oidcRefused audits and answers a sign-in the provider or the token
// checks refused.
func (h *Handler) oidcRefused(w http.ResponseWriter, r *http.Request, err error) {
	reason := "login: oidc: " + err.Error()
	h.api.Deny(r, identity.Principal{}, audit.ActionLogin, reason, map[string]string{"rule": string(oidc.RuleOf(err))})
	apihttp.WriteError(w, http.StatusUnauthorized, err.Error())
}

func parseCSRAndTTL(w http.ResponseWriter, csrPEM, ttlText string) (*x509.CertificateRequest, time.Duration, bool) {
	csr, err := ca.ParseCSR([]byte(csrPEM))
	if err != nil {
		apihttp.WriteError(w, http.StatusBadRequest, err.Error())
		return nil, 0, false
	}
	var ttl time.Duration
	if ttlText != "" {
		if ttl, err = time.ParseDuration(ttlText); err != nil || ttl <= 0 {
			apihttp.WriteError(w, http.StatusBadRequest, "ttl: want a positive duration such as 1h")
			return nil, 0, false
		}
	}
	return csr, ttl, true
}

// issue signs p's certificate (no later than notAfter, when set), audits
// the login with its method, and answers with it when w is not nil. It
// returns the answer and whether all went well; on failure it has answered
// w (when not nil).
func (h *Handler) issue(w http.ResponseWriter, r *http.Request, csr *x509.CertificateRequest, ttl time.Duration,
	p identity.Principal, method string, notAfter time.Time) (*LoginResponse, bool) {
	fail := func(status int, msg string) (*LoginResponse, bool) {
		if w != nil {
			apihttp.WriteError(w, status, msg)
		}
		return nil, false
	}
	if !notAfter.IsZero() {
		left := notAfter.Sub(h.api.Now())
		if left <= 0 {
			return fail(http.StatusUnauthorized, "the credential has expired")
		}
		if ttl <= 0 || ttl > left {
			ttl = left
		}
	}
	p.LoginID = newLoginID()
	cert, err := h.cfg.CA.IssueUser(csr.PublicKey, p, ttl)
	if err != nil {
		h.api.Logger.Error("login: issue certificate", "principal", p.String(), "err", err)
		return fail(http.StatusInternalServerError, "could not issue a certificate")
	}
	if h.api.Emit(r, audit.Event{Type: audit.TypeAuthLogin, Principal: p, Fields: map[string]string{
		"login_id": p.LoginID, "method": method, "expires": cert.NotAfter.UTC().Format(time.RFC3339)}}) != nil {
		return fail(http.StatusServiceUnavailable, "audit unavailable: try again later")
	}
	resp := &LoginResponse{Certificate: string(ca.CertPEM(cert.Raw)), CA: string(h.cfg.CA.RootPEM()), Principal: p, Expires: cert.NotAfter.UTC()}
	if w != nil {
		apihttp.WriteJSON(w, http.StatusOK, resp)
	}
	return resp, true
}
