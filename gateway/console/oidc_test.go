package console_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/console"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/oidc"
	"github.com/limenhq/limen/test/idp"
)

// oidcEnv is a console that signs people in through a real test IdP, back
// to the configured redirect URL callback.
type oidcEnv struct {
	*env
	idp      *idp.IdP
	callback string
}

func newOIDCEnv(t *testing.T) *oidcEnv {
	t.Helper()
	p, err := idp.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.AddClient(idp.Client{ID: "limen", Secret: "s3cret", Redirects: []string{"https://127.0.0.1:*/console/oidc/callback"}})
	p.AddUser(idp.User{Email: "carol@example.com", Password: "pw", Groups: []string{"admins"}})
	p.AddUser(idp.User{Email: "mallory@example.com", Password: "pw", Groups: []string{"admins"}, EmailUnverified: true})
	prov, err := oidc.NewProvider(context.Background(), oidc.ProviderConfig{Issuer: p.URL, ClientID: "limen", ClientSecret: "s3cret",
		Mapping: oidc.DefaultMapping()})
	if err != nil {
		t.Fatal(err)
	}
	o := &oidcEnv{idp: p}
	o.env = newEnvWith(t, nil, func(e *env, c *console.Config) {
		o.callback = e.srv.URL + "/console/oidc/callback"
		c.OIDC = func(redirect string) console.OIDCFlow { return prov.Flow(redirect) }
		c.OIDCRedirectURL = o.callback
	})
	return o
}

// start opens the flow in c and signs in at the IdP as email; it returns
// the callback URL the IdP sends the browser to.
func (o *oidcEnv) start(t *testing.T, c *http.Client, email string) *url.URL {
	t.Helper()
	if _, body, _ := page(t, c, o.env, "/console/signin"); !strings.Contains(body, `id="oidc-signin"`) {
		t.Fatal("the sign-in page does not offer the identity provider")
	}
	resp, err := c.Get(o.srv.URL + "/console/oidc")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	auth := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(auth, o.idp.URL) || !strings.Contains(auth, "code_challenge_method=S256") {
		t.Fatalf("start: %d to %q, want the IdP with a PKCE challenge", resp.StatusCode, auth)
	}
	back, err := idp.SignIn(auth, o.callback, email, "pw")
	if err != nil {
		t.Fatal(err)
	}
	return back
}

func get(t *testing.T, c *http.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// refused wants the callback u to answer the sign-in page saying why, and
// no sign-in after it.
func (o *oidcEnv) refused(t *testing.T, c *http.Client, u, why string) {
	t.Helper()
	resp, body := get(t, c, u)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, `id="signin"`) || !strings.Contains(body, why) {
		t.Fatalf("callback %s: %d, want 403 and the sign-in page saying %q\n%s", u, resp.StatusCode, why, body)
	}
	if st, _, _ := page(t, c, o.env, "/console/sessions"); st == http.StatusOK {
		t.Fatal("signed in after a refused callback")
	}
}

// TestOIDCSignIn signs a person into the console through a real test IdP
// (the browser's part played over HTTP): the sign-in page offers the
// provider, the IdP's groups become traits (groups=admins makes carol an
// admin in the example data), and the sign-in is audited as client
// console. A token that breaks a rule (email_verified), a callback whose
// state is not this browser's, and one with no flow cookie are refused.
func TestOIDCSignIn(t *testing.T) {
	o := newOIDCEnv(t)
	c := o.client(t)
	resp, body := get(t, c, o.start(t, c, "carol@example.com").String())
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `http-equiv="refresh"`) {
		t.Fatalf("callback: %d %q, want the signed-in page", resp.StatusCode, body)
	}
	if st, body, _ := page(t, c, o.env, "/console/audit"); st != http.StatusOK || !strings.Contains(body, "carol@example.com") {
		t.Fatalf("carol, an admin by her IdP group, on the audit page: %d", st)
	}
	logins, err := o.audit.Search(context.Background(), audit.Query{Type: audit.TypeAuthLogin, User: "carol@example.com"})
	if err != nil || len(logins) != 1 || logins[0].Principal.ClientID != console.ClientID || logins[0].Fields["method"] != "oidc" {
		t.Fatalf("carol's sign-in audited as %+v (%v), want one OIDC login of client console", logins, err)
	}

	t.Run("email not verified", func(t *testing.T) {
		c := o.client(t)
		o.refused(t, c, o.start(t, c, "mallory@example.com").String(), "email_verified")
	})
	t.Run("another browser's state", func(t *testing.T) {
		c := o.client(t)
		back := o.start(t, c, "carol@example.com")
		q := back.Query()
		q.Set("state", strings.Repeat("0", 64))
		back.RawQuery = q.Encode()
		o.refused(t, c, back.String(), "stale")
	})
	t.Run("no flow cookie", func(t *testing.T) {
		c := o.client(t)
		back := o.start(t, c, "carol@example.com")
		o.refused(t, o.client(t), back.String(), "stale")
	})
	t.Run("free text from the provider's error", func(t *testing.T) {
		c := o.client(t)
		u := o.callback + "?" + url.Values{"error": {"access_denied"}, "error_description": {"Call 555-0100 to restore your account"}}.Encode()
		o.refused(t, c, u, "did not sign you in")
		u = o.callback + "?" + url.Values{"error": {"Call 555-0100 to restore your account"}}.Encode()
		if _, body := get(t, c, u); strings.Contains(body, "555-0100") {
			t.Fatalf("the sign-in page echoes the callback's error text:\n%s", body)
		}
	})
}

// A locked person's OIDC sign-in is refused before auth.login is stored
// (issue #30, hardening): the refusal is an auth.denied, and no login of
// theirs is on the trail.
func TestOIDCSignInLockedRefusedBeforeLogin(t *testing.T) {
	o := newOIDCEnv(t)
	o.locks.Apply(locks.Change{Op: locks.OpSet, Lock: locks.Lock{Target: locks.Target{Kind: identity.KindUser, Name: "oidc:carol@example.com"},
		Reason: "incident", CreatedBy: "user:dana", CreatedAt: o.clock}})
	c := o.client(t)
	o.refused(t, c, o.start(t, c, "carol@example.com").String(), "locked")
	if logins := stored(t, o.env, audit.TypeAuthLogin); len(logins) != 0 {
		t.Fatalf("a locked person's sign-in stored auth.login: %+v", logins)
	}
	denied, err := o.audit.Search(context.Background(), audit.Query{Type: audit.TypeAuthDenied, User: "carol@example.com"})
	if err != nil || len(denied) == 0 {
		t.Fatalf("no auth.denied of carol's refused sign-in (%v)", err)
	}
}

// The callback the identity provider is sent back to is the configured
// one, whatever Host the browser's request names: a forged Host must not
// steer the code to another origin.
func TestOIDCRedirectIsTheConfiguredOne(t *testing.T) {
	var asked []string
	e := newEnvWith(t, nil, func(e *env, c *console.Config) {
		c.OIDC = func(redirect string) console.OIDCFlow { asked = append(asked, redirect); return standInFlow{redirect} }
		c.OIDCRedirectURL = "https://limen.example.com:8443/console/oidc/callback"
	})
	c := e.client(t)
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/console/oidc", nil)
	req.Host = "evil.example"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if got := loc.Query().Get("redirect_uri"); got != "https://limen.example.com:8443/console/oidc/callback" {
		t.Fatalf("the flow's redirect URI is %q (asked %q), want the configured one", got, asked)
	}
	for _, a := range asked {
		if strings.Contains(a, "evil.example") {
			t.Fatalf("a flow was built back to the request's Host: %q", a)
		}
	}
}

// standInFlow is an identity provider's flow that only says where it would
// send the browser back (the real IdP is TestOIDCSignIn's).
type standInFlow struct{ redirect string }

func (f standInFlow) AuthCodeURL(state, _, _ string) string {
	return "https://idp.example/auth?" + url.Values{"redirect_uri": {f.redirect}, "state": {state}}.Encode()
}

func (standInFlow) Exchange(context.Context, string, string, string) (identity.Principal, error) {
	return identity.Principal{}, io.ErrUnexpectedEOF
}

// The console refuses an OIDC sign-in without a configured redirect URL,
// or with one that is not https, or not the console's callback.
func TestOIDCRedirectMustBeConfigured(t *testing.T) {
	for _, u := range []string{"", "http://limen.example.com/console/oidc/callback", "https://limen.example.com/elsewhere",
		"https://limen.example.com/console/oidc/callback?x=1", "/console/oidc/callback", "https://user@limen.example.com/console/oidc/callback"} {
		if err := console.ValidOIDCRedirectURL(u); err == nil {
			t.Errorf("redirect URL %q accepted", u)
		}
	}
	if err := console.ValidOIDCRedirectURL("https://limen.example.com:8443/console/oidc/callback"); err != nil {
		t.Errorf("a good redirect URL refused: %v", err)
	}
}
