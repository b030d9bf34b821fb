package console

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

// OIDCFlow is the code flow of the proxy's identity provider for one
// redirect URL (oidc.Flow): the console signs people in through the same
// provider as limen login --oidc.
type OIDCFlow interface {
	AuthCodeURL(state, nonce, verifier string) string
	Exchange(ctx context.Context, code, verifier, nonce string) (identity.Principal, error)
}

// cookieOIDC holds one sign-in's state, nonce and PKCE verifier while the
// browser is at the identity provider. SameSite=Lax, not Strict: the
// provider's redirect back is a cross-site navigation. A __Host- cookie,
// like the console's others.
const cookieOIDC = "__Host-limen_console_oidc"

// oidcFlowTTL bounds a sign-in at the identity provider.
const oidcFlowTTL = 10 * time.Minute

// callbackPath is where the identity provider sends the browser back;
// register https://PROXY/console/oidc/callback as a redirect URI there, and
// give the proxy the same URL (Config.OIDCRedirectURL).
const callbackPath = Prefix + "oidc/callback"

// ValidOIDCRedirectURL checks the console's OIDC redirect URL: an
// absolute https URL of the console's callback (PROXY/console/oidc/callback),
// with no user, query or fragment. It is configured, never taken from a
// request's Host, which the client writes.
func ValidOIDCRedirectURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case s == "":
		return errors.New("required with OIDC sign-in: the console's callback URL registered at the identity provider, https://PROXY" + callbackPath)
	case err != nil:
		return fmt.Errorf("%q: %w", s, err)
	case u.Scheme != "https" || u.Host == "" || u.Opaque != "":
		return fmt.Errorf("%q: want an absolute https URL, https://PROXY%s", s, callbackPath)
	case u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return fmt.Errorf("%q: a redirect URL has no user, query or fragment", s)
	case u.EscapedPath() != callbackPath:
		return fmt.Errorf("%q: the path must be the console's callback, %s", s, callbackPath)
	}
	return nil
}

// flow is the provider's code flow back to the configured redirect URL.
func (h *Handler) flow() OIDCFlow {
	return h.cfg.OIDC(h.cfg.OIDCRedirectURL)
}

// providerErrors are what the sign-in page says for the OAuth 2.0 error
// codes a provider sends back (RFC 6749 §4.1.2.1, OIDC Core §3.1.2.6);
// the callback's query is anyone's to write, so nothing of it is shown.
var providerErrors = map[string]string{
	"access_denied":              "The identity provider did not sign you in: access was denied.",
	"login_required":             "The identity provider did not sign you in: sign in there first, then try again.",
	"interaction_required":       "The identity provider did not sign you in: sign in there first, then try again.",
	"consent_required":           "The identity provider did not sign you in: it wants your consent first.",
	"account_selection_required": "The identity provider did not sign you in: choose an account there first.",
	"temporarily_unavailable":    "The identity provider did not sign you in: it is unavailable, try again later.",
	"server_error":               "The identity provider did not sign you in: it failed, try again later.",
}

// oidcStart sends the browser to the identity provider with a fresh state,
// nonce and PKCE verifier, which only this browser's cookie holds.
func (h *Handler) oidcStart(w http.ResponseWriter, r *http.Request) {
	state, nonce, verifier := randomToken(), randomToken(), randomToken()
	http.SetCookie(w, &http.Cookie{Name: cookieOIDC, Value: state + "." + nonce + "." + verifier, Path: cookiePath,
		MaxAge: int(oidcFlowTTL / time.Second), HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, h.flow().AuthCodeURL(state, nonce, verifier), http.StatusSeeOther)
}

// oidcCallback checks the state against the browser's cookie, redeems the
// code (the ID token's checks are gateway/oidc's), and signs the person in
// as client console. Every refusal is audited and answered with the
// sign-in page (403), in Limen's own words.
func (h *Handler) oidcCallback(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieOIDC, Value: "", Path: cookiePath, MaxAge: -1,
		HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
	refuse := func(reason, why string) {
		h.deny(r, identity.Principal{}, "console OIDC sign-in: "+reason)
		h.signinForm(w, r, http.StatusForbidden, why, "")
	}
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		why, ok := providerErrors[e]
		if !ok {
			why = "The identity provider did not sign you in."
		}
		refuse(fmt.Sprintf("the identity provider answered %.64q", e), why)
		return
	}
	c, err := r.Cookie(cookieOIDC)
	parts := []string{}
	if err == nil {
		parts = strings.Split(c.Value, ".")
	}
	if len(parts) != 3 || subtle.ConstantTimeCompare([]byte(parts[0]), []byte(q.Get("state"))) != 1 {
		refuse("missing or wrong state", "That sign-in link is stale or was not started here: sign in again.")
		return
	}
	p, err := h.flow().Exchange(r.Context(), q.Get("code"), parts[2], parts[1])
	if err != nil {
		// The state matched this browser's own flow, so the error is about
		// the provider's answer to it (gateway/oidc's words), not the query.
		refuse(err.Error(), "Your identity provider's sign-in was refused: "+err.Error())
		return
	}
	switch err := h.SignIn(w, r, p, "oidc"); {
	case errors.Is(err, ErrLocked):
		h.signinForm(w, r, http.StatusForbidden, err.Error(), "")
		return
	case err != nil:
		h.fail(w, r, nil, http.StatusServiceUnavailable, "the audit trail or the sign-in store is unavailable, so no one was signed in: try again later")
		return
	}
	// A page, not a redirect: after a redirect chain that began at the
	// provider, the browser would withhold the SameSite=Strict session
	// cookie; a navigation this page starts is same-site.
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = signedInPage.Execute(w, Prefix)
}

var signedInPage = template.Must(template.New("signed-in").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={{.}}"><title>Signed in — Limen</title></head>
<body><p>Signed in. <a href="{{.}}">Continue to the console</a>.</p></body></html>
`))
