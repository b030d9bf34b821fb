package console_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/limenhq/limen/gateway/console"
	"github.com/limenhq/limen/gateway/store/postgres"
	pgtest "github.com/limenhq/limen/test/postgres"
)

// get GETs path on e with only the sign-in cookie value, as a browser
// whose request the load balancer sent to e.
func getWith(t *testing.T, e *env, path, cookie string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
	req.AddCookie(&http.Cookie{Name: "__Host-limen_console", Value: cookie})
	c := e.srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSignInSharedBetweenProxies: two consoles on one PostgreSQL (two
// proxies behind a load balancer) share sign-ins: a browser signed in at
// one is signed in at the other, signed out at both when it signs out at
// either, and signed out (not let in) while the database is down.
func TestSignInSharedBetweenProxies(t *testing.T) {
	srv := pgtest.Start(t)
	b, err := postgres.Open(context.Background(), postgres.Config{URL: srv.Database(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	shared, err := b.SignIns(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	withShared := func(_ *env, c *console.Config) { c.SignIns = shared }
	a, other := newEnvWith(t, nil, withShared), newEnvWith(t, nil, withShared)
	c := a.client(t)
	resp := signIn(t, c, a, "dana", "dana-password-1")
	var cookie string
	for _, ck := range resp.Cookies() {
		if ck.Name == "__Host-limen_console" {
			cookie = ck.Value
		}
	}
	if resp.StatusCode != http.StatusSeeOther || cookie == "" {
		t.Fatalf("sign-in at the first proxy: %d, cookie %q", resp.StatusCode, cookie)
	}
	if code := getWith(t, other, "/console/sessions", cookie); code != http.StatusOK {
		t.Fatalf("the second proxy answers %d to the first one's sign-in, want 200", code)
	}
	// A console with its own (in-memory) sign-ins does not know it.
	if code := getWith(t, newEnv(t), "/console/sessions", cookie); code != http.StatusSeeOther {
		t.Fatalf("a console with sign-ins of its own answers %d, want the redirect to sign in", code)
	}

	srv.Stop()
	if code := getWith(t, other, "/console/sessions", cookie); code != http.StatusSeeOther {
		t.Fatalf("with the database down: %d, want the redirect to sign in (fail closed)", code)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if code := getWith(t, other, "/console/sessions", cookie); code != http.StatusOK {
		t.Fatalf("with the database back: %d, want 200", code)
	}

	_, _, csrf := page(t, c, a, "/console/sessions")
	if resp := post(t, c, a, "/console/signout", url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", resp.StatusCode)
	}
	if code := getWith(t, other, "/console/sessions", cookie); code != http.StatusSeeOther {
		t.Fatalf("after signing out at the first proxy the second answers %d, want the redirect", code)
	}
}
