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
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/limenhq/limen/gateway/auth"
	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/identity"
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
	ca     *auth.Authority
	users  *users.Store
	tokens *enroll.TokenStore
	now    *atomic.Int64
}

func setup(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	quiet := slog.New(slog.DiscardHandler)
	e := &env{now: &atomic.Int64{}}
	e.now.Store(time.Now().Unix())
	var err error
	if e.ca, err = auth.Open(auth.Options{DataDir: dir, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	if e.users, err = users.Open(filepath.Join(dir, users.FileName), users.Options{Cost: bcrypt.MinCost}); err != nil {
		t.Fatal(err)
	}
	clock := func() time.Time { return time.Unix(e.now.Load(), 0) }
	if e.tokens, err = enroll.OpenTokenStore(filepath.Join(dir, enroll.TokenFileName), enroll.TokenStoreOptions{
		Auditor: auth.SlogAuditor{Logger: quiet}, Now: clock}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.users.Close(); e.tokens.Close() })
	pol := fakePolicy{clusters: []string{"prod", "staging"}}
	h, err := authapi.New(authapi.Config{CA: e.ca, Users: e.users, Tokens: e.tokens, Clusters: pol, Admin: pol,
		Workers: fakeWorkers{"prod": true}, Logger: quiet, Auditor: auth.SlogAuditor{Logger: quiet}})
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
	other, _ := auth.Open(auth.Options{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	_, err := p.Login(ctx, profile.LoginRequest{User: "alice", Password: "alice-password", Trust: profile.Trust{Fingerprint: other.Fingerprint()}})
	if err == nil || !strings.Contains(err.Error(), "pinned fingerprint") {
		t.Fatalf("wrong CA pin: %v", err)
	}
	if _, err := p.Credentials(time.Now()); !errors.Is(err, profile.ErrNotLoggedIn) {
		t.Fatalf("credentials after failed logins: %v", err)
	}
}

func TestAdminEndpointsFollowPolicy(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	pa, admin := e.login(t, "root-admin", "admin-password")
	pu, alice := e.login(t, "alice", "alice-password")
	ac, _ := pa.Client(admin)
	uc, _ := pu.Client(alice)
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
	pa, admin := e.login(t, "root-admin", "admin-password")
	ac, _ := pa.Client(admin)
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
	other, _ := auth.Open(auth.Options{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	wrong, _ := enroll.NewToken(other.Fingerprint())
	if _, err := enroll.Enroll(ctx, enroll.Options{Proxy: e.proxy, Cluster: "prod", Token: wrong.String(), DataDir: t.TempDir()}); err == nil ||
		!strings.Contains(err.Error(), "pinned fingerprint") {
		t.Fatalf("wrong CA in token: %v", err)
	}
}

func TestHostileRequests(t *testing.T) {
	e := setup(t)
	p, _ := profile.Open(t.TempDir(), e.proxy)
	p.Ensure()
	host := "https://" + e.proxy
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: auth.PinnedTLSConfig("127.0.0.1", e.ca.Fingerprint())}}
	for _, tt := range []struct{ path, body string }{
		{authapi.PathLogin, `{"user":"alice","password":"alice-password","csr":"nope"}`},
		{authapi.PathLogin, `{"user":"alice","password":"alice-password","csr":"","extra":1}`},
		{authapi.PathLogin, `{"user":"alice"}{"user":"bob"}`},
		{authapi.PathLogin, strings.Repeat("[", 100000)},
		{authapi.PathEnroll, `{"token":"lj1.x.y","cluster":"prod","csr":""}`},
	} {
		resp, err := client.Post(host+tt.path, "application/json", strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("POST %s %.40q: %s, want 400", tt.path, tt.body, resp.Status)
		}
	}
}
