package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/limenhq/limen/gateway/access"
	"github.com/limenhq/limen/gateway/adminapi"
	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/console"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/users"
)

// env is a console on real stores and the embedded default policy, whose
// example data makes trait groups=admins an admin and bob a plain user.
type env struct {
	srv    *httptest.Server
	users  *users.Store
	locks  *locks.Set
	store  *locks.Store
	audit  *audit.Store
	admin  *adminapi.Handler
	clock  time.Time
	regist *sessions.Registry
	// dir is the data directory (recstore.Path(dir) holds the recordings).
	dir string
}

func newEnv(t *testing.T) *env { return newEnvWith(t, nil) }

// newEnvWith is newEnv with the "what may I do" computation and options,
// which see the env with its server started (e.srv.URL is known) but
// serving no console yet.
func newEnvWith(t *testing.T, access console.AccessFunc, opts ...func(*env, *console.Config)) *env {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	e := &env{clock: time.Now(), dir: dir}
	var err error
	if e.users, err = users.Open(users.Path(dir), users.Options{Cost: bcrypt.MinCost}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.users.Close() })
	if err := e.users.Add(ctx, "dana", "dana-password-1", map[string][]string{"groups": {"admins"}}); err != nil {
		t.Fatal(err)
	}
	if err := e.users.Add(ctx, "bob", "bob-password-1", nil); err != nil {
		t.Fatal(err)
	}
	if e.audit, err = audit.Open(ctx, audit.Path(dir), audit.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.audit.Close() })
	if e.store, err = locks.Open(ctx, locks.Path(dir)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.store.Close() })
	e.locks = locks.NewSet()
	e.regist = sessions.New(sessions.Config{Locks: e.locks})
	t.Cleanup(e.regist.Close)
	pol, err := policy.New(ctx, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pol.Close() })
	recs, err := recstore.Open(recstore.Path(dir))
	if err != nil {
		t.Fatal(err)
	}
	principal := func(*http.Request) (identity.Principal, error) { return identity.Principal{}, nil }
	if e.admin, err = adminapi.New(adminapi.Config{LockStore: e.store, Locks: e.locks, Sessions: e.regist, Admin: pol,
		Principal: principal, Audit: e.audit, OnChange: func(_ context.Context, c locks.Change) { e.locks.Apply(c) }}); err != nil {
		t.Fatal(err)
	}
	cfg := console.Config{Users: e.users, Admin: pol, Locks: e.locks, Audit: e.audit, Events: e.audit,
		Recordings: recs, Sessions: e.regist, Control: e.admin, Access: access, Now: func() time.Time { return e.clock }}
	mux := http.NewServeMux()
	e.srv = httptest.NewTLSServer(mux)
	t.Cleanup(e.srv.Close)
	for _, o := range opts {
		o(e, &cfg)
	}
	h, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle(console.Prefix, h)
	return e
}

// client is a browser stand-in: a cookie jar that does not follow
// redirects, so that each answer can be checked.
func (e *env) client(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	c := *e.srv.Client() // a copy: Client returns one shared value
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// page GETs path and returns the status, the body and the page's CSRF
// token, if it has one.
func page(t *testing.T, c *http.Client, e *env, path string) (int, string, string) {
	t.Helper()
	resp, err := c.Get(e.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	tok := ""
	if m := csrfRE.FindSubmatch(b); m != nil {
		tok = string(m[1])
	}
	return resp.StatusCode, string(b), tok
}

func post(t *testing.T, c *http.Client, e *env, path string, form url.Values) *http.Response {
	t.Helper()
	resp, err := c.PostForm(e.srv.URL+path, form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func signIn(t *testing.T, c *http.Client, e *env, user, pw string) *http.Response {
	t.Helper()
	_, _, pre := page(t, c, e, "/console/signin")
	return post(t, c, e, "/console/signin", url.Values{"user": {user}, "password": {pw}, "csrf": {pre}})
}

func TestSignInCookieAndHeaders(t *testing.T) {
	e := newEnv(t)
	c := e.client(t)
	if resp := signIn(t, c, e, "dana", "wrong-password"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong password: %d, want 401", resp.StatusCode)
	}
	resp := signIn(t, c, e, "dana", "dana-password-1")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/sessions" {
		t.Fatalf("sign-in: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "__Host-limen_console" && ck.Value != "" {
			cookie = ck
		}
	}
	if cookie == nil || !cookie.HttpOnly || !cookie.Secure || cookie.SameSite != http.SameSiteStrictMode ||
		cookie.MaxAge <= 0 || cookie.MaxAge > int(console.DefaultSessionTTL/time.Second) {
		t.Fatalf("sign-in cookie %+v: want HttpOnly, Secure, SameSite=Strict, short-lived", cookie)
	}
	r, err := c.Get(e.srv.URL + "/console/sessions")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Fatalf("sessions page: %d", r.StatusCode)
	}
	csp := r.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") {
		t.Errorf("CSP %q allows inline script", csp)
	}
	// The sign-in is audited, bound to client console.
	evs, err := e.audit.Search(context.Background(), audit.Query{Type: audit.TypeAuthLogin})
	if err != nil || len(evs) != 1 || evs[0].Principal.ClientID != console.ClientID || evs[0].Principal.Name != "dana" {
		t.Fatalf("auth.login events %+v (%v): want dana's, client console", evs, err)
	}
}

func TestStateChangesNeedCSRF(t *testing.T) {
	e := newEnv(t)
	c := e.client(t)
	signIn(t, c, e, "dana", "dana-password-1")
	_, _, tok := page(t, c, e, "/console/locks")
	if tok == "" {
		t.Fatal("the locks page has no CSRF token")
	}
	form := url.Values{"kind": {"user"}, "name": {"bob"}, "reason": {"test"}}
	if resp := post(t, c, e, "/console/locks", form); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("lock without a CSRF token: %d, want 403", resp.StatusCode)
	}
	form.Set("csrf", strings.Repeat("0", len(tok)))
	if resp := post(t, c, e, "/console/locks", form); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("lock with a wrong CSRF token: %d, want 403", resp.StatusCode)
	}
	if _, ok := e.locks.Locked(identity.Principal{Kind: identity.KindUser, Name: "bob"}, e.clock); ok {
		t.Fatal("a refused POST locked bob")
	}
	form.Set("csrf", tok)
	if resp := post(t, c, e, "/console/locks", form); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("lock with the CSRF token: %d, want 303", resp.StatusCode)
	}
	if _, ok := e.locks.Locked(identity.Principal{Kind: identity.KindUser, Name: "bob"}, e.clock); !ok {
		t.Fatal("the lock is not in force")
	}
	// The sign-in form needs its own token too (login CSRF).
	c2 := e.client(t)
	if resp := post(t, c2, e, "/console/signin", url.Values{"user": {"dana"}, "password": {"dana-password-1"}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("sign-in without its token: %d, want 403", resp.StatusCode)
	}
}

func TestLockedRemovedAndExpiredRefusedOnNextRequest(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name   string
		change func(t *testing.T)
	}{
		{"locked", func(t *testing.T) {
			e.locks.Apply(locks.Change{Op: locks.OpSet, Lock: locks.Lock{Target: locks.Target{Kind: identity.KindUser, Name: "bob"},
				Reason: "incident", CreatedBy: "user:dana", CreatedAt: e.clock}})
			t.Cleanup(func() {
				e.locks.Apply(locks.Change{Op: locks.OpRemove, Lock: locks.Lock{Target: locks.Target{Kind: identity.KindUser, Name: "bob"}}})
			})
		}},
		{"expired", func(t *testing.T) {
			e.clock = e.clock.Add(console.DefaultSessionTTL + time.Second)
		}},
		{"removed", func(t *testing.T) {
			if err := e.users.Remove(context.Background(), "bob"); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.client(t)
			signIn(t, c, e, "bob", "bob-password-1")
			if st, _, _ := page(t, c, e, "/console/sessions"); st != http.StatusOK {
				t.Fatalf("signed in: %d", st)
			}
			tc.change(t)
			st, _, _ := page(t, c, e, "/console/api/sessions")
			if st != http.StatusForbidden && st != http.StatusUnauthorized {
				t.Fatalf("after the user was %s: %d, want a refusal", tc.name, st)
			}
		})
	}
}

func TestPagesNeedPolicy(t *testing.T) {
	e := newEnv(t)
	bob := e.client(t)
	signIn(t, bob, e, "bob", "bob-password-1")
	for _, p := range []string{"/console/audit", "/console/api/audit", "/console/locks", "/console/policy"} {
		if st, _, _ := page(t, bob, e, p); st != http.StatusForbidden {
			t.Errorf("bob GET %s: %d, want 403", p, st)
		}
	}
	for _, p := range []string{"/console/sessions", "/console/recordings", "/console/access"} {
		if st, _, _ := page(t, bob, e, p); st != http.StatusOK {
			t.Errorf("bob GET %s: %d, want 200", p, st)
		}
	}
	dana := e.client(t)
	signIn(t, dana, e, "dana", "dana-password-1")
	for _, p := range []string{"/console/audit", "/console/locks", "/console/policy"} {
		if st, body, _ := page(t, dana, e, p); st != http.StatusOK {
			t.Errorf("dana GET %s: %d\n%s", p, st, body)
		}
	}
	// Signed out, a page sends to the sign-in; the JSON is refused.
	anon := e.client(t)
	if st, _, _ := page(t, anon, e, "/console/sessions"); st != http.StatusSeeOther {
		t.Errorf("signed out, sessions page: %d, want 303 to the sign-in", st)
	}
	if st, _, _ := page(t, anon, e, "/console/api/sessions"); st != http.StatusUnauthorized {
		t.Errorf("signed out, sessions JSON: %d, want 401", st)
	}
}

// The "what may I do" page renders gateway/access's three answers per
// resource and verb, asked for the signed-in person through the client they
// name (kubectl unless they name one), never through the console. The
// computation is a stand-in here; the e2e asks the real one. Without one,
// the page says it is not wired.
func TestAccessPage(t *testing.T) {
	var asked identity.Principal
	stand := func(_ context.Context, p identity.Principal, _ time.Time, cluster, ns string) (access.Report, error) {
		asked = p
		return access.Report{Cluster: cluster, Namespace: ns, Client: p.ClientID, Rows: []access.Row{
			{Resource: access.Resource{Version: "v1", Resource: "pods"},
				Answers: map[string]access.Answer{"get": access.Allowed, "delete": access.RefusedByKubernetes}},
			{Resource: access.Resource{Version: "v1", Resource: "pods", Subresource: "exec"},
				Answers: map[string]access.Answer{"create": access.OutOfScope}},
		}}, nil
	}
	e := newEnvWith(t, stand)
	c := e.client(t)
	signIn(t, c, e, "bob", "bob-password-1")
	st, body, _ := page(t, c, e, "/console/access?cluster=demo&namespace=default&client=grafana")
	if st != http.StatusOK {
		t.Fatalf("access page: %d", st)
	}
	for _, want := range []string{string(access.Allowed), "refused by Kubernetes", string(access.OutOfScope), "pods/exec", "deletecollection"} {
		if !strings.Contains(body, want) {
			t.Errorf("the access page lacks %q", want)
		}
	}
	if asked.Name != "bob" || asked.ClientID != "grafana" {
		t.Errorf("asked for %+v, want bob through grafana", asked)
	}
	if _, _, _ = page(t, c, e, "/console/access?cluster=demo"); asked.ClientID != "kubectl" {
		t.Errorf("with no client named, asked through %q, want kubectl", asked.ClientID)
	}
	unwired := newEnv(t)
	c = unwired.client(t)
	signIn(t, c, unwired, "bob", "bob-password-1")
	if _, body, _ := page(t, c, unwired, "/console/access?cluster=demo"); !strings.Contains(body, "access-unwired") {
		t.Error("without the computation, the access page does not say it is not wired")
	}
}

// Sessions the registry no longer remembers come from the audit trail:
// their owner sees them, another user does not, an admin does.
func TestEndedSessionsFromTheAuditTrail(t *testing.T) {
	e := newEnv(t)
	code := 0
	err := e.audit.Emit(context.Background(), audit.Event{Type: audit.TypeSessionEnd, Time: e.clock.Add(-time.Hour),
		Principal: identity.Principal{Kind: identity.KindUser, Name: "bob"}, Cluster: "demo", SessionID: "old-exec-1",
		Session: &audit.Session{Kind: sessions.AuditKind, Login: "exec", Target: "ns/pod/c", ExitCode: &code,
			Duration: time.Minute, EndReason: audit.EndCompleted}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.users.Add(context.Background(), "carol", "carol-password-1", nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		user, pw string
		sees     bool
	}{{"bob", "bob-password-1", true}, {"carol", "carol-password-1", false}, {"dana", "dana-password-1", true}} {
		c := e.client(t)
		signIn(t, c, e, tc.user, tc.pw)
		_, body, _ := page(t, c, e, "/console/api/sessions")
		if got := strings.Contains(body, "old-exec-1"); got != tc.sees {
			t.Errorf("%s sees bob's ended session: %v, want %v\n%s", tc.user, got, tc.sees, body)
		}
	}
}

// Sign-in is rate-limited by the user store, as limen login is: past the
// burst for a name, even the right password is refused for now.
func TestSignInRateLimited(t *testing.T) {
	e := newEnv(t)
	c := e.client(t)
	burst := users.DefaultLimits().UserBurst
	for i := range burst {
		if resp := signIn(t, c, e, "bob", "wrong-password"); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d, want 401", i+1, resp.StatusCode)
		}
	}
	resp := signIn(t, c, e, "bob", "bob-password-1")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("past the burst: %d (Retry-After %q), want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	evs, err := e.audit.Search(context.Background(), audit.Query{Type: audit.TypeAuthDenied, Action: audit.ActionLogin})
	if err != nil || len(evs) != burst+1 {
		t.Fatalf("%d refused sign-ins audited (%v), want %d", len(evs), err, burst+1)
	}
}
