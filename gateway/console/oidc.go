package console

import (
	"context"
	"crypto/subtle"
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
// provider's redirect back is a cross-site navigation.
const cookieOIDC = "limen_console_oidc"

// oidcFlowTTL bounds a sign-in at the identity provider.
const oidcFlowTTL = 10 * time.Minute

// callbackPath is where the identity provider sends the browser back;
// register https://PROXY/console/oidc/callback as a redirect URI.
const callbackPath = Prefix + "oidc/callback"

// flow is the provider's code flow back to this request's host.
func (h *Handler) flow(r *http.Request) OIDCFlow {
	return h.cfg.OIDC((&url.URL{Scheme: "https", Host: r.Host, Path: callbackPath}).String())
}

// oidcStart sends the browser to the identity provider with a fresh state,
// nonce and PKCE verifier, which only this browser's cookie holds.
func (h *Handler) oidcStart(w http.ResponseWriter, r *http.Request) {
	state, nonce, verifier := randomToken(), randomToken(), randomToken()
	http.SetCookie(w, &http.Cookie{Name: cookieOIDC, Value: state + "." + nonce + "." + verifier, Path: callbackPath,
		MaxAge: int(oidcFlowTTL / time.Second), HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, h.flow(r).AuthCodeURL(state, nonce, verifier), http.StatusSeeOther)
}

// oidcCallback checks the state against the browser's cookie, redeems the
// code (the ID token's checks are gateway/oidc's), and signs the person in
// as client console. Every refusal is audited and shown on the sign-in
// page.
func (h *Handler) oidcCallback(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieOIDC, Value: "", Path: callbackPath, MaxAge: -1,
		HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
	refuse := func(reason, why string) {
		h.deny(r, identity.Principal{}, "console OIDC sign-in: "+reason)
		http.Redirect(w, r, Prefix+"signin?why="+url.QueryEscape(why), http.StatusSeeOther)
	}
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		refuse("the identity provider answered "+e, "The identity provider did not sign you in ("+e+").")
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
	p, err := h.flow(r).Exchange(r.Context(), q.Get("code"), parts[2], parts[1])
	if err != nil {
		refuse(err.Error(), "Your identity provider's sign-in was refused: "+err.Error())
		return
	}
	if err := h.SignIn(w, r, p, "oidc"); err != nil {
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
