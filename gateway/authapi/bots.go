package authapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/bots"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/internal/apihttp"
	"github.com/limenhq/limen/gateway/oidc"
)

// CIIssuer is a trusted CI issuer: policy knows it by Name (so that policy
// data does not depend on a URL) and its Kind (which claims pin a token to
// one owner), the Verifier checks its tokens.
type CIIssuer struct {
	Name     string
	Kind     bots.CIKind
	Verifier *oidc.Verifier
}

// BotPolicy decides whether a CI workload token may log in as a bot
// (data.limen.bots.oidc_login); issuer is the CIIssuer's Name, kind its
// Kind.
type BotPolicy interface {
	BotOIDCAllow(ctx context.Context, bot identity.Principal, issuer string, kind bots.CIKind, claims map[string]any) (bool, error)
}

// Paths and admin actions of the bot endpoints.
const (
	PathBotLogin     = "/v1/login/bot"
	PathBotOIDCLogin = "/v1/login/bot/oidc"
	PathBots         = "/v1/admin/bots"

	ActionBotsList   = "bots.list"
	ActionBotsAdd    = "bots.add"
	ActionBotsRemove = "bots.remove"
	ActionBotsToken  = "bots.token"
)

// Audit event types of bot administration.
const (
	TypeBotAdd    audit.Type = "bot.add"
	TypeBotRemove audit.Type = "bot.remove"
	TypeBotToken  audit.Type = "bot.token"
)

// BotRequest creates a bot.
type BotRequest struct {
	Name   string              `json:"name"`
	Traits map[string][]string `json:"traits,omitempty"`
}

// BotTokenRequest makes a join secret for a bot.
type BotTokenRequest struct {
	TTL  string `json:"ttl"`
	Uses int    `json:"uses,omitempty"`
}

// BotTokenResponse carries a new join secret; it is shown once.
type BotTokenResponse struct {
	Token string          `json:"token"`
	Info  bots.SecretInfo `json:"info"`
}

// BotLoginRequest logs a bot in with a join secret.
type BotLoginRequest struct {
	Bot   string `json:"bot"`
	Token string `json:"token"`
	CSR   string `json:"csr"`
	TTL   string `json:"ttl,omitempty"`
}

// BotOIDCLoginRequest logs a bot in with a CI workload's ID token.
type BotOIDCLoginRequest struct {
	Bot     string `json:"bot"`
	IDToken string `json:"id_token"`
	CSR     string `json:"csr"`
	TTL     string `json:"ttl,omitempty"`
}

func (h *Handler) mountBots() error {
	if h.cfg.Bots == nil {
		return nil
	}
	if len(h.cfg.CI) > 0 && h.cfg.BotPolicy == nil {
		return errors.New("authapi: trusted CI issuers need a bot policy")
	}
	h.api.Public("POST "+PathBotLogin, h.botLogin)
	if len(h.cfg.CI) > 0 {
		h.api.Public("POST "+PathBotOIDCLogin, h.botOIDCLogin)
	}
	h.api.Admin("GET "+PathBots, ActionBotsList, h.listBots)
	h.api.Admin("POST "+PathBots, ActionBotsAdd, h.addBot)
	h.api.Admin("DELETE "+PathBots+"/{name}", ActionBotsRemove, h.removeBot)
	h.api.Admin("POST "+PathBots+"/{name}/tokens", ActionBotsToken, h.botToken)
	return nil
}

func (h *Handler) listBots(w http.ResponseWriter, r *http.Request, _ identity.Principal) {
	list, err := h.cfg.Bots.List(r.Context())
	if err != nil {
		h.storeFailed(w, err)
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, list)
}

func (h *Handler) addBot(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	var req BotRequest
	if !apihttp.Decode(w, r, &req) {
		return
	}
	h.botChange(w, r, p, TypeBotAdd, req.Name, nil, func() error { return h.cfg.Bots.Add(r.Context(), req.Name, req.Traits) })
}

func (h *Handler) removeBot(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	name := r.PathValue("name")
	h.botChange(w, r, p, TypeBotRemove, name, nil, func() error { return h.cfg.Bots.Remove(r.Context(), name) })
}

func (h *Handler) botToken(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	var req BotTokenRequest
	if !apihttp.Decode(w, r, &req) {
		return
	}
	ttl, err := time.ParseDuration(req.TTL)
	if err != nil {
		apihttp.WriteError(w, http.StatusBadRequest, "ttl: want a duration such as 1h")
		return
	}
	name := r.PathValue("name")
	var out BotTokenResponse
	fields := map[string]string{"ttl": ttl.String()}
	h.botChange(w, r, p, TypeBotToken, name, fields, func() error {
		var err error
		out.Token, out.Info, err = h.cfg.Bots.CreateSecret(r.Context(), name, ttl, req.Uses, p)
		fields["secret_id"], fields["expires"] = out.Info.ID, out.Info.Expires.Format(time.RFC3339)
		if req.Uses > 0 {
			fields["uses"] = strconv.Itoa(req.Uses)
		}
		return err
	}, func() { apihttp.WriteJSON(w, http.StatusOK, out) })
}

// botChange runs change and audits the outcome, as userChange does. done,
// if given, answers a success (else 204).
func (h *Handler) botChange(w http.ResponseWriter, r *http.Request, p identity.Principal, typ audit.Type, name string,
	fields map[string]string, change func() error, done ...func()) {
	err := change()
	if fields == nil {
		fields = map[string]string{}
	}
	fields["bot"] = claimedUser(name)
	if err != nil {
		fields["error"] = err.Error()
	}
	aerr := h.api.Emit(r, audit.Event{Type: typ, Principal: p, Fields: fields})
	switch {
	case err == nil && aerr != nil:
		apihttp.WriteError(w, http.StatusServiceUnavailable, "the change is made, but the audit trail did not record it: "+aerr.Error())
	case err == nil && len(done) > 0:
		done[0]()
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, bots.ErrNotFound):
		apihttp.WriteError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, bots.ErrExists):
		apihttp.WriteError(w, http.StatusConflict, err.Error())
	default:
		apihttp.WriteError(w, http.StatusBadRequest, err.Error())
	}
}

func (h *Handler) botLogin(w http.ResponseWriter, r *http.Request) {
	var req BotLoginRequest
	if !apihttp.Decode(w, r, &req) {
		return
	}
	csr, ttl, ok := parseCSRAndTTL(w, req.CSR, req.TTL)
	if !ok {
		return
	}
	b, info, err := h.cfg.Bots.Redeem(r.Context(), req.Bot, req.Token)
	switch {
	case errors.Is(err, bots.ErrBadSecret):
		h.api.Deny(r, identity.Principal{}, audit.ActionLogin, "login: bot: bad join secret", map[string]string{"bot": claimedUser(req.Bot)})
		apihttp.WriteError(w, http.StatusUnauthorized, err.Error())
		return
	case err != nil:
		h.storeFailed(w, err)
		return
	}
	// A bot's login is the command line's: its certificate names kubectl.
	p := identity.Principal{Kind: identity.KindBot, Name: b.Name, Traits: b.Traits, ClientID: identity.ClientKubectl}
	// The certificate ends with the secret: renewal needs it again.
	h.issue(w, r, csr, ttl, p, "bot-secret:"+info.ID, info.Expires)
}

// botOIDCLogin logs a bot in with a CI workload's ID token: the token must
// pass every rule for one trusted CI issuer (its audience being the one
// configured for it), the bot must exist, and policy must match the
// token's claims to the bot.
func (h *Handler) botOIDCLogin(w http.ResponseWriter, r *http.Request) {
	var req BotOIDCLoginRequest
	if !apihttp.Decode(w, r, &req) {
		return
	}
	csr, ttl, ok := parseCSRAndTTL(w, req.CSR, req.TTL)
	if !ok {
		return
	}
	refuse := func(status int, msg string) {
		h.api.Deny(r, identity.Principal{}, audit.ActionLogin, "login: bot oidc: "+msg, map[string]string{"bot": claimedUser(req.Bot)})
		apihttp.WriteError(w, status, msg)
	}
	ci := h.ciIssuer(req.IDToken)
	if ci == nil {
		refuse(http.StatusUnauthorized, "the token's issuer is not a trusted CI issuer (--ci-issuer)")
		return
	}
	tok, err := ci.Verifier.Verify(r.Context(), req.IDToken, "")
	if err != nil {
		refuse(http.StatusUnauthorized, err.Error())
		return
	}
	b, err := h.cfg.Bots.Get(r.Context(), req.Bot)
	if errors.Is(err, bots.ErrNotFound) {
		refuse(http.StatusForbidden, "no bot "+claimedUser(req.Bot))
		return
	} else if err != nil {
		h.storeFailed(w, err)
		return
	}
	p := identity.Principal{Kind: identity.KindBot, Name: b.Name, Traits: b.Traits, ClientID: identity.ClientKubectl}
	allow, err := h.cfg.BotPolicy.BotOIDCAllow(r.Context(), p, ci.Name, ci.Kind, tok.Claims)
	if err != nil {
		h.api.Logger.Error("bot policy evaluation failed", "bot", b.Name, "err", err)
		apihttp.WriteError(w, http.StatusServiceUnavailable, "policy unavailable: try again later")
		return
	}
	if !allow {
		refuse(http.StatusForbidden, "policy does not let this token's claims log in as bot "+b.Name+" (data.limen.bots.oidc_login)")
		return
	}
	// A token logs in once: a copy (from a job's log, a compromised step)
	// is refused while the token lives. Only tokens policy let in are
	// remembered, so other repositories' tokens cannot fill the cache.
	jti, _ := tok.Claims["jti"].(string)
	if jti == "" {
		refuse(http.StatusUnauthorized, "the token has no jti (a string token id), so its reuse could not be refused")
		return
	}
	if err := h.cfg.Replay.Use(ci.Name+"\x00"+jti, tok.Expiry, h.api.Now()); errors.Is(err, bots.ErrReplayFull) || errors.Is(err, bots.ErrReplayUnknown) {
		h.api.Logger.Error("bot oidc login: replay check failed", "bot", b.Name, "issuer", ci.Name, "err", err)
		refuse(http.StatusServiceUnavailable, err.Error())
		return
	} else if err != nil {
		refuse(http.StatusUnauthorized, err.Error())
		return
	}
	h.issue(w, r, csr, ttl, p, "bot-oidc:"+ci.Name, tok.Expiry)
}

// ciVerifier picks the trusted issuer the token claims. The claim is read
// before verification only to choose a verifier; that verifier then checks
// everything, the issuer included.
func (h *Handler) ciIssuer(raw string) *CIIssuer {
	jws, err := jose.ParseSigned(raw, []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512, jose.PS256, jose.EdDSA})
	if err != nil {
		return nil
	}
	var c struct {
		Iss string `json:"iss"`
	}
	if json.Unmarshal(jws.UnsafePayloadWithoutVerification(), &c) != nil {
		return nil
	}
	for i := range h.cfg.CI {
		if h.cfg.CI[i].Verifier.Issuer() == c.Iss {
			return &h.cfg.CI[i]
		}
	}
	return nil
}
