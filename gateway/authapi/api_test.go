package authapi_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/profile"
	"github.com/limenhq/limen/gateway/users"
)

type fakePolicy struct{ clusters []string }

func (f fakePolicy) Clusters(context.Context, identity.Principal) ([]string, error) {
	return f.clusters, nil
}

func (fakePolicy) AdminAllow(_ context.Context, p identity.Principal, _ string) (bool, error) {
	return slices.Contains(p.Traits["groups"], "admins"), nil
}

type fakeWorkers map[string]bool

func (f fakeWorkers) Connected(c string) bool { return f[c] }

type env struct {
	proxy  string
	ca     *ca.Authority
	users  *users.Store
	tokens *enroll.TokenStore
	audit  *audit.Store
	locks  *locks.Set
	now    *atomic.Int64
	// logins are the results OnLogin was told of, in order.
	loginsMu sync.Mutex
	logins   []string
}

func setup(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	quiet := slog.New(slog.DiscardHandler)
	e := &env{now: &atomic.Int64{}}
	e.now.Store(time.Now().Unix())
	var err error
	if e.ca, err = ca.Open(ca.Options{DataDir: dir, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	if e.users, err = users.Open(filepath.Join(dir, users.FileName), users.Options{Cost: bcrypt.MinCost}); err != nil {
		t.Fatal(err)
	}
	if e.audit, err = audit.Open(context.Background(), audit.Path(dir), audit.Options{Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	clock := func() time.Time { return time.Unix(e.now.Load(), 0) }
	if e.tokens, err = enroll.OpenTokenStore(filepath.Join(dir, enroll.TokenFileName), enroll.TokenStoreOptions{
		Audit: e.audit, Now: clock}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.users.Close(); e.tokens.Close(); e.audit.Close() })
	e.locks = locks.NewSet()
	pol := fakePolicy{clusters: []string{"prod", "staging"}}
	h, err := authapi.New(authapi.Config{CA: e.ca, Users: e.users, Tokens: e.tokens, Clusters: pol, Admin: pol,
		Workers: fakeWorkers{"prod": true}, Logger: quiet, Audit: e.audit, Locks: e.locks, Now: clock, ClientRegistry: registry{"coffee-menu"},
		OnLogin: func(r string) { e.loginsMu.Lock(); e.logins = append(e.logins, r); e.loginsMu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = e.ca.ServerTLSConfig()
	srv.Config.ErrorLog = slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	e.proxy = strings.TrimPrefix(srv.URL, "https://")
	ctx := context.Background()
	e.users.Add(ctx, "root-admin", "admin-password", map[string][]string{"groups": {"admins"}})
	e.users.Add(ctx, "alice", "alice-password", map[string][]string{"groups": {"dev"}})
	return e
}

func (e *env) login(t *testing.T, user, pw string) (*profile.Profile, *profile.Credentials) {
	t.Helper()
	p, _ := profile.Open(t.TempDir(), e.proxy)
	if _, err := p.Login(context.Background(), profile.LoginRequest{User: user, Password: pw,
		Trust: profile.Trust{Fingerprint: e.ca.Fingerprint()}}); err != nil {
		t.Fatalf("login %s: %v", user, err)
	}
	creds, err := p.Credentials(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return p, creds
}

// client logs user in and returns an API client presenting the
// certificate, with the credentials.
func (e *env) client(t *testing.T, user, pw string) (*authapi.Client, *profile.Credentials) {
	t.Helper()
	p, creds := e.login(t, user, pw)
	c, err := p.Client(creds)
	if err != nil {
		t.Fatal(err)
	}
	return c, creds
}

func TestLoginWhoAmIClusters(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	p, creds := e.login(t, "alice", "alice-password")
	if creds.Principal.Name != "alice" || creds.Principal.LoginID == "" {
		t.Fatalf("principal %+v", creds.Principal)
	}
	c, _ := p.Client(creds)
	who, err := c.WhoAmI(ctx)
	if err != nil || who.Principal.Name != "alice" || !slices.Equal(who.Principal.Traits["groups"], []string{"dev"}) {
		t.Fatalf("WhoAmI = %+v, %v", who, err)
	}
	cl, err := c.Clusters(ctx)
	want := []authapi.Cluster{{Name: "prod", Connected: true}, {Name: "staging"}}
	if err != nil || !slices.Equal(cl, want) {
		t.Fatalf("Clusters = %+v, %v", cl, err)
	}
	anon, _ := p.Client(nil)
	if _, err := anon.WhoAmI(ctx); !isStatus(err, 401) {
		t.Fatalf("whoami without certificate: %v", err)
	}
}

func isStatus(err error, code int) bool {
	var se *authapi.StatusError
	return errors.As(err, &se) && se.Code == code
}

func TestLoginRefusals(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	p, _ := profile.Open(t.TempDir(), e.proxy)
	pin := profile.Trust{Fingerprint: e.ca.Fingerprint()}
	_, errWrong := p.Login(ctx, profile.LoginRequest{User: "alice", Password: "not-her-password", Trust: pin})
	_, errUnknown := p.Login(ctx, profile.LoginRequest{User: "nobody", Password: "not-her-password", Trust: pin})
	if !isStatus(errWrong, 401) || errWrong.Error() != errUnknown.Error() {
		t.Fatalf("wrong password %q vs unknown user %q: must be the same 401", errWrong, errUnknown)
	}
	other, _ := ca.Open(ca.Options{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	_, err := p.Login(ctx, profile.LoginRequest{User: "alice", Password: "alice-password", Trust: profile.Trust{Fingerprint: other.Fingerprint()}})
	if err == nil || !strings.Contains(err.Error(), "pinned fingerprint") {
		t.Fatalf("wrong CA pin: %v", err)
	}
	if _, err := p.Credentials(time.Now()); !errors.Is(err, profile.ErrNotLoggedIn) {
		t.Fatalf("credentials after failed logins: %v", err)
	}
}

// TestLoginsCounted: every password check reaches OnLogin with its result,
// for the metrics; a wrong password and an unknown user alike.
func TestLoginsCounted(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	p, _ := profile.Open(t.TempDir(), e.proxy)
	pin := profile.Trust{Fingerprint: e.ca.Fingerprint()}
	_, _ = p.Login(ctx, profile.LoginRequest{User: "alice", Password: "wrong", Trust: pin})
	_, _ = p.Login(ctx, profile.LoginRequest{User: "nobody", Password: "wrong", Trust: pin})
	e.login(t, "alice", "alice-password")
	e.loginsMu.Lock()
	defer e.loginsMu.Unlock()
	if want := []string{"bad_credentials", "bad_credentials", "ok"}; !slices.Equal(e.logins, want) {
		t.Fatalf("OnLogin saw %v, want %v", e.logins, want)
	}
}

func TestAdminEndpointsFollowPolicy(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	ac, _ := e.client(t, "root-admin", "admin-password")
	uc, _ := e.client(t, "alice", "alice-password")
	if err := uc.AddUser(ctx, authapi.UserRequest{Name: "mallory", Password: "mallory-pw"}); !isStatus(err, 403) {
		t.Fatalf("non-admin add user: %v", err)
	}
	if _, err := uc.CreateToken(ctx, authapi.TokenRequest{Cluster: "prod"}); !isStatus(err, 403) {
		t.Fatalf("non-admin create token: %v", err)
	}
	if err := ac.AddUser(ctx, authapi.UserRequest{Name: "bob", Password: "bob-password", Traits: map[string][]string{"groups": {"dev"}}}); err != nil {
		t.Fatal(err)
	}
	if err := ac.AddUser(ctx, authapi.UserRequest{Name: "bob", Password: "bob-password"}); !isStatus(err, 409) {
		t.Fatalf("duplicate: %v", err)
	}
	if err := ac.SetPassword(ctx, "bob", "new-bob-password"); err != nil {
		t.Fatal(err)
	}
	list, err := ac.ListUsers(ctx)
	if err != nil || len(list) != 3 {
		t.Fatalf("ListUsers = %+v, %v", list, err)
	}
	if err := ac.RemoveUser(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	if err := ac.RemoveUser(ctx, "bob"); !isStatus(err, 404) {
		t.Fatalf("remove twice: %v", err)
	}
}

func TestEnrollment(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	ac, _ := e.client(t, "root-admin", "admin-password")
	newToken := func(cluster, ttl string) string {
		tr, err := ac.CreateToken(ctx, authapi.TokenRequest{Cluster: cluster, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Token
	}
	tok := newToken("prod", "1h")
	dir := t.TempDir()
	if _, err := enroll.LoadWorkerIdentity(dir); !errors.Is(err, enroll.ErrNotEnrolled) {
		t.Fatalf("before enrollment: %v", err)
	}
	if _, err := enroll.Enroll(ctx, enroll.Options{Proxy: e.proxy, Cluster: "staging", Token: tok, DataDir: dir}); err == nil ||
		!strings.Contains(err.Error(), "another cluster") {
		t.Fatalf("token for another cluster: %v", err)
	}
	w, err := enroll.Enroll(ctx, enroll.Options{Proxy: e.proxy, Cluster: "prod", Token: tok, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !w.GrantKey.Equal(e.ca.GrantPublicKey()) || w.Cluster != "prod" {
		t.Fatalf("identity %+v", w)
	}
	if _, err := enroll.Enroll(ctx, enroll.Options{Proxy: e.proxy, Cluster: "prod", Token: tok, DataDir: t.TempDir()}); err == nil ||
		!strings.Contains(err.Error(), "used already") {
		t.Fatalf("token reused: %v", err)
	}
	expiring := newToken("prod", "1m")
	e.now.Add(61)
	if _, err := enroll.Enroll(ctx, enroll.Options{Proxy: e.proxy, Cluster: "prod", Token: expiring, DataDir: t.TempDir()}); err == nil ||
		!strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired token: %v", err)
	}
	loaded, err := enroll.LoadWorkerIdentity(dir)
	if err != nil || loaded.Cluster != "prod" || !loaded.GrantKey.Equal(e.ca.GrantPublicKey()) {
		t.Fatalf("LoadWorkerIdentity = %+v, %v", loaded, err)
	}
	// The worker certificate reaches the proxy as a worker, never as a user.
	resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: loaded.TLSConfig()}}).Get("https://" + e.proxy + authapi.PathWhoAmI)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("whoami with a worker certificate: %s", resp.Status)
	}
	// A token pinning another CA never reaches the proxy's endpoint.
	other, _ := ca.Open(ca.Options{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	wrong, _ := enroll.NewToken(other.Fingerprint())
	if _, err := enroll.Enroll(ctx, enroll.Options{Proxy: e.proxy, Cluster: "prod", Token: wrong.String(), DataDir: t.TempDir()}); err == nil ||
		!strings.Contains(err.Error(), "pinned fingerprint") {
		t.Fatalf("wrong CA in token: %v", err)
	}
}

func TestHostileRequests(t *testing.T) {
	e := setup(t)
	host := "https://" + e.proxy
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.PinnedTLSConfig("127.0.0.1", e.ca.Fingerprint())}}
	json := "application/json"
	for _, tt := range []struct {
		path, ctype, body string
		want              int
	}{
		{authapi.PathLogin, json, `{"user":"alice","password":"alice-password","csr":"nope"}`, 400},
		{authapi.PathLogin, json, `{"user":"alice","password":"alice-password","csr":"","extra":1}`, 400},
		{authapi.PathLogin, json, `{"user":"alice"}{"user":"bob"}`, 400},
		{authapi.PathLogin, json, `{"user":"alice"}}`, 400},
		{authapi.PathLogin, json, strings.Repeat("[", 100000), 400},
		{authapi.PathLogin, json, `{"user":"` + strings.Repeat("a", 100000) + `"}`, 413},
		{authapi.PathLogin, "text/plain", `{"user":"alice","password":"alice-password","csr":""}`, 415},
		{authapi.PathLogin, "", `{"user":"alice","password":"alice-password","csr":""}`, 415},
		{authapi.PathEnroll, json, `{"token":"lj1.x.y","cluster":"prod","csr":""}`, 400},
		{authapi.PathEnroll, "application/x-www-form-urlencoded", `token=lj1.x.y`, 415},
	} {
		req, _ := http.NewRequest(http.MethodPost, host+tt.path, strings.NewReader(tt.body))
		if tt.ctype != "" {
			req.Header.Set("Content-Type", tt.ctype)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("POST %s (%s) %.40q: %s, want %d", tt.path, tt.ctype, tt.body, resp.Status, tt.want)
		}
	}
}

// deniedEvents returns the auth.denied events in the audit store, oldest
// first.
func (e *env) deniedEvents(t *testing.T) []audit.Event {
	t.Helper()
	list, err := e.audit.Search(context.Background(), audit.Query{Type: audit.TypeAuthDenied})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// TestRefusalsAreStoredAsDenied checks that every refusal of the identity
// API reaches the audit store as a valid auth.denied event. They used to be
// emitted without a denied body, failed validation, and were dropped.
func TestRefusalsAreStoredAsDenied(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	p, _ := profile.Open(t.TempDir(), e.proxy)
	pin := profile.Trust{Fingerprint: e.ca.Fingerprint()}
	if _, err := p.Login(ctx, profile.LoginRequest{User: "alice", Password: "wrong", Trust: pin}); !isStatus(err, 401) {
		t.Fatalf("bad password: %v", err)
	}
	if _, err := p.Login(ctx, profile.LoginRequest{User: "evil\x1b[2J", Password: "wrong", Trust: pin}); !isStatus(err, 401) {
		t.Fatalf("invalid user name: %v", err)
	}
	uc, alice := e.client(t, "alice", "alice-password")
	if _, err := uc.CreateToken(ctx, authapi.TokenRequest{Cluster: "prod"}); !isStatus(err, 403) {
		t.Fatalf("non-admin create token: %v", err)
	}
	ac, _ := e.client(t, "root-admin", "admin-password")
	tr, err := ac.CreateToken(ctx, authapi.TokenRequest{Cluster: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	enrollWith := func(tok string) error {
		_, err := enroll.Enroll(ctx, enroll.Options{Proxy: e.proxy, Cluster: "prod", Token: tok, DataDir: t.TempDir()})
		return err
	}
	if err := enrollWith(tr.Token); err != nil {
		t.Fatal(err)
	}
	if err := enrollWith(tr.Token); err == nil {
		t.Fatal("token reused")
	}
	short, err := ac.CreateToken(ctx, authapi.TokenRequest{Cluster: "prod", TTL: "1m"})
	if err != nil {
		t.Fatal(err)
	}
	e.now.Add(61)
	if err := enrollWith(short.Token); err == nil {
		t.Fatal("expired token accepted")
	}

	type want struct {
		who, action, reason, path, field, value, cluster string
	}
	wants := []want{
		{"", audit.ActionLogin, "login: bad credentials", authapi.PathLogin, "user", "alice", ""},
		{"", audit.ActionLogin, "login: bad credentials", authapi.PathLogin, "user", "(invalid name)", ""},
		{"user:alice", audit.ActionAdmin, "admin action tokens.create not allowed", authapi.PathTokens, "", "", ""},
		{"", audit.ActionEnroll, "join token: join token was used already", authapi.PathEnroll, "token_id", tr.Info.ID, "prod"},
		{"", audit.ActionEnroll, "join token: join token has expired", authapi.PathEnroll, "token_id", short.Info.ID, "prod"},
	}
	got := e.deniedEvents(t)
	if len(got) != len(wants) {
		t.Fatalf("%d auth.denied events stored, want %d: %+v", len(got), len(wants), got)
	}
	for i, w := range wants {
		ev := got[i]
		who := ""
		if ev.Principal.Name != "" {
			who = ev.Principal.String()
		}
		if ev.Validate() != nil || ev.Denied.Hop != audit.HopProxy || ev.Denied.Action != w.action || !strings.HasPrefix(ev.Denied.Reason, w.reason) ||
			ev.Denied.Path != w.path || who != w.who || ev.Fields[w.field] != w.value || ev.Cluster != w.cluster ||
			ev.ClientAddr != "127.0.0.1" {
			t.Errorf("event %d: %+v denied %+v; want %+v", i, ev, ev.Denied, w)
		}
	}

	// The successes are stored too, with the principal who acted.
	logins, err := e.audit.Search(ctx, audit.Query{Type: audit.TypeAuthLogin, User: "alice"})
	if err != nil || len(logins) != 1 || logins[0].Fields["login_id"] != alice.Principal.LoginID {
		t.Fatalf("auth.login of alice: %+v, %v", logins, err)
	}
	created, err := e.audit.Search(ctx, audit.Query{Type: audit.TypeTokenCreate, User: "root-admin"})
	if err != nil || len(created) != 2 || created[0].Cluster != "prod" || created[0].Fields["token_id"] != tr.Info.ID {
		t.Fatalf("token.create by root-admin: %+v, %v", created, err)
	}
}

// TestAdminChecksLocksAndExpiry: every call that needs a certificate —
// admin calls, and whoami and clusters too — refuses a locked caller and a
// certificate that expired on a connection opened while it was valid, as
// /k8s/ does, and audits each refusal as auth.denied with action admin.
func TestAdminChecksLocksAndExpiry(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	ac, admin := e.client(t, "root-admin", "admin-password")
	uc, alice := e.client(t, "alice", "alice-password")
	if _, err := ac.ListUsers(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(e.now.Load(), 0)
	lock := func(p identity.Principal) locks.Lock {
		return locks.Lock{Target: locks.TargetOf(p), Reason: "incident 7", CreatedBy: "user:other", CreatedAt: now}
	}
	e.locks.Apply(locks.Change{Op: locks.OpSet, Lock: lock(admin.Principal)})
	e.locks.Apply(locks.Change{Op: locks.OpSet, Lock: lock(alice.Principal)})
	_, err := ac.ListUsers(ctx)
	if !isStatus(err, 403) || !strings.Contains(err.Error(), "locked by user:other: incident 7") {
		t.Fatalf("locked admin lists users: %v", err)
	}
	if err := ac.AddUser(ctx, authapi.UserRequest{Name: "mallory", Password: "mallory-pw"}); !isStatus(err, 403) {
		t.Fatalf("locked admin adds a user: %v", err)
	}
	if _, err := e.users.Authenticate(ctx, "mallory", "mallory-pw", "test"); err == nil {
		t.Fatal("a locked admin's change took effect")
	}
	if _, err := uc.WhoAmI(ctx); !isStatus(err, 403) {
		t.Fatalf("locked user asks whoami: %v", err)
	}
	if _, err := uc.Clusters(ctx); !isStatus(err, 403) {
		t.Fatalf("locked user lists clusters: %v", err)
	}
	e.locks.Apply(locks.Change{Op: locks.OpRemove, Lock: lock(admin.Principal)})
	e.locks.Apply(locks.Change{Op: locks.OpRemove, Lock: lock(alice.Principal)})
	if _, err := ac.ListUsers(ctx); err != nil {
		t.Fatalf("after unlock: %v", err)
	}
	if _, err := uc.WhoAmI(ctx); err != nil {
		t.Fatalf("whoami after unlock: %v", err)
	}

	e.now.Store(admin.Cert.NotAfter.Add(time.Second).Unix())
	if _, err := ac.ListUsers(ctx); !isStatus(err, 401) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired certificate lists users: %v", err)
	}
	if _, err := ac.WhoAmI(ctx); !isStatus(err, 401) {
		t.Fatalf("expired certificate asks whoami: %v", err)
	}

	var got []string
	for _, ev := range e.deniedEvents(t) {
		got = append(got, ev.Principal.Name+"|"+ev.Denied.Action+"|"+ev.Denied.Reason)
	}
	want := []string{
		"root-admin|admin|admin action users.list: locked: user root-admin is locked by user:other: incident 7",
		"root-admin|admin|admin action users.add: locked: ",
		"alice|admin|GET /v1/whoami: locked: user alice is locked",
		"alice|admin|GET /v1/clusters: locked: ",
		// An expired certificate authenticates nobody; the reason names it.
		"|admin|admin action users.list: client certificate expired at ",
		"|admin|GET /v1/whoami: client certificate expired at ",
	}
	if len(got) != len(want) {
		t.Fatalf("auth.denied events:\n%s\nwant %d", strings.Join(got, "\n"), len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("event %d: %q, want %q…", i, got[i], want[i])
		}
	}
	if !strings.Contains(got[5], "(user:root-admin): run limen login") {
		t.Errorf("expired certificate refusal %q does not name its holder", got[5])
	}
}

// TestAuditDown: with the audit trail down, a login gets no certificate,
// and a user change that went through is reported as unrecorded (503), not
// as done.
func TestAuditDown(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	ac, _ := e.client(t, "root-admin", "admin-password")
	e.audit.Close() // a closed store refuses every event: the real "audit trail unavailable"
	if err := ac.AddUser(ctx, authapi.UserRequest{Name: "bob", Password: "bob-password"}); !isStatus(err, 503) ||
		!strings.Contains(err.Error(), "did not record it") {
		t.Fatalf("add user with audit down: %v, want 503", err)
	}
	if _, err := e.users.Authenticate(ctx, "bob", "bob-password", "test"); err != nil {
		t.Fatalf("the change itself did not happen: %v", err)
	}
	p, _ := profile.Open(t.TempDir(), e.proxy)
	if _, err := p.Login(ctx, profile.LoginRequest{User: "alice", Password: "alice-password",
		Trust: profile.Trust{Fingerprint: e.ca.Fingerprint()}}); !isStatus(err, 503) {
		t.Fatalf("login with audit down: %v, want 503", err)
	}
}
