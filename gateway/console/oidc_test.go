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
	"github.com/limenhq/limen/gateway/oidc"
	"github.com/limenhq/limen/test/idp"
)

// TestOIDCSignIn signs a person into the console through a real test IdP
// (the browser's part played over HTTP): the sign-in page offers the
// provider, the IdP's groups become traits (groups=admins makes carol an
// admin in the example data), and the sign-in is audited as client
// console. A token that breaks a rule (email_verified), a callback whose
// state is not this browser's, and one with no flow cookie are refused.
func TestOIDCSignIn(t *testing.T) {
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
	e := newEnvWith(t, nil, func(c *console.Config) {
		c.OIDC = func(redirect string) console.OIDCFlow { return prov.Flow(redirect) }
	})
	callback := e.srv.URL + "/console/oidc/callback"

	// start opens the flow in c and signs in at the IdP as email; it
	// returns the callback URL the IdP sends the browser to.
	start := func(t *testing.T, c *http.Client, email string) *url.URL {
		t.Helper()
		if _, body, _ := page(t, c, e, "/console/signin"); !strings.Contains(body, `id="oidc-signin"`) {
			t.Fatal("the sign-in page does not offer the identity provider")
		}
		resp, err := c.Get(e.srv.URL + "/console/oidc")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		auth := resp.Header.Get("Location")
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(auth, p.URL) || !strings.Contains(auth, "code_challenge_method=S256") {
			t.Fatalf("start: %d to %q, want the IdP with a PKCE challenge", resp.StatusCode, auth)
		}
		back, err := idp.SignIn(auth, callback, email, "pw")
		if err != nil {
			t.Fatal(err)
		}
		return back
	}
	get := func(t *testing.T, c *http.Client, u string) (*http.Response, string) {
		t.Helper()
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	c := e.client(t)
	resp, body := get(t, c, start(t, c, "carol@example.com").String())
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `http-equiv="refresh"`) {
		t.Fatalf("callback: %d %q, want the signed-in page", resp.StatusCode, body)
	}
	if st, body, _ := page(t, c, e, "/console/audit"); st != http.StatusOK || !strings.Contains(body, "carol@example.com") {
		t.Fatalf("carol, an admin by her IdP group, on the audit page: %d", st)
	}
	logins, err := e.audit.Search(context.Background(), audit.Query{Type: audit.TypeAuthLogin, User: "carol@example.com"})
	if err != nil || len(logins) != 1 || logins[0].Principal.ClientID != console.ClientID || logins[0].Fields["method"] != "oidc" {
		t.Fatalf("carol's sign-in audited as %+v (%v), want one OIDC login of client console", logins, err)
	}

	refused := func(t *testing.T, c *http.Client, u, why string) {
		t.Helper()
		resp, _ := get(t, c, u)
		loc, _ := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusSeeOther || loc == nil || loc.Path != "/console/signin" || !strings.Contains(loc.Query().Get("why"), why) {
			t.Fatalf("callback %s: %d to %q, want the sign-in page saying %q", u, resp.StatusCode, resp.Header.Get("Location"), why)
		}
		if st, _, _ := page(t, c, e, "/console/sessions"); st == http.StatusOK {
			t.Fatal("signed in after a refused callback")
		}
	}
	t.Run("email not verified", func(t *testing.T) {
		c := e.client(t)
		refused(t, c, start(t, c, "mallory@example.com").String(), "email_verified")
	})
	t.Run("another browser's state", func(t *testing.T) {
		c := e.client(t)
		back := start(t, c, "carol@example.com")
		q := back.Query()
		q.Set("state", strings.Repeat("0", 64))
		back.RawQuery = q.Encode()
		refused(t, c, back.String(), "stale")
	})
	t.Run("no flow cookie", func(t *testing.T) {
		c := e.client(t)
		back := start(t, c, "carol@example.com")
		refused(t, e.client(t), back.String(), "stale")
	})
}
