package authapi_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/oauth2"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/bots"
	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/oidc"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/profile"
	"github.com/limenhq/limen/gateway/users"
	"github.com/limenhq/limen/test/idp"
)

// TestOIDCLogin signs in through the identity API and a real test IdP
// (browser part played over HTTP): a person gets a certificate with the
// IdP's groups as traits; a token that breaks a rule is refused with the
// rule named, in the answer and in audit.
func TestOIDCLogin(t *testing.T) {
	e := startOIDCAPI(t)
	p, authority, store, proxy := e.idp, e.authority, e.store, e.proxy
	signIn := func(email string) (*authapi.LoginResponse, error) { return e.signIn(t, email) }
	p.AddUser(idp.User{Email: "carol@example.com", Password: "pw", Groups: []string{"dev"}})
	p.AddUser(idp.User{Email: "mallory@example.com", Password: "pw", Groups: []string{"admins"}, EmailUnverified: true})

	resp, err := signIn("carol@example.com")
	if err != nil {
		t.Fatal(err)
	}
	// The provider's carol, never a local user of that name: in the answer
	// and in the certificate.
	if resp.Principal.String() != "user:oidc:carol@example.com" || resp.Principal.Traits["groups"][0] != "dev" {
		t.Fatalf("principal %+v", resp.Principal)
	}
	if certs, err := ca.ParseCertsPEM([]byte(resp.Certificate)); err != nil || len(certs) == 0 {
		t.Fatal(err)
	} else if p, err := ca.PrincipalOfCert(certs[0]); err != nil || p.Issuer != "oidc" || p.Name != "carol@example.com" {
		t.Fatalf("certificate principal %+v, %v", p, err)
	}

	_, err = signIn("mallory@example.com")
	if err == nil || !strings.Contains(err.Error(), "rule email_verified") || !strings.Contains(err.Error(), "401") {
		t.Fatalf("unverified email: %v", err)
	}
	evs, err := store.Search(context.Background(), audit.Query{Type: audit.TypeAuthDenied})
	if err != nil || len(evs) == 0 || evs[0].Denied == nil || !strings.Contains(evs[0].Denied.Reason, "email_verified") {
		t.Fatalf("auth.denied events %+v, %v", evs, err)
	}

	// The redirect must be the CLI's loopback listener.
	prof, _ := profile.Open(t.TempDir(), proxy)
	_, err = prof.LoginWith(context.Background(), profile.Trust{Fingerprint: authority.Fingerprint()}, 0,
		func(ctx context.Context, c *authapi.Client, csr, ttl string) (authapi.LoginResponse, error) {
			_, err := c.OIDCURL(ctx, authapi.OIDCURLRequest{RedirectURI: "https://evil.example/callback",
				State: strings.Repeat("s", 20), Nonce: strings.Repeat("n", 20), CodeChallenge: strings.Repeat("c", 43)})
			return authapi.LoginResponse{}, err
		})
	if err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("a non-loopback redirect: %v", err)
	}
}

// oidcAPI is the identity API with a real test IdP as its OIDC provider
// (client "limen") and as the trusted CI issuer "ci" of the example data's
// bot ci-deployer, decided by the real embedded policy.
type oidcAPI struct {
	idp       *idp.IdP
	authority *ca.Authority
	store     *audit.Store
	proxy     string // HOST:PORT of the API
}

func startOIDCAPI(t *testing.T) *oidcAPI {
	t.Helper()
	p, err := idp.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.AddClient(idp.Client{ID: "limen", Secret: "s3cret", Redirects: []string{"http://127.0.0.1:*/callback"}})
	dir := t.TempDir()
	quiet := slog.New(slog.DiscardHandler)
	authority, err := ca.Open(ca.Options{DataDir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	us, _ := users.Open(filepath.Join(dir, users.FileName), users.Options{Cost: bcrypt.MinCost})
	store, _ := audit.Open(context.Background(), audit.Path(dir), audit.Options{Logger: quiet})
	tokens, _ := enroll.OpenTokenStore(filepath.Join(dir, enroll.TokenFileName), enroll.TokenStoreOptions{Audit: store})
	bs, err := bots.Open(bots.Path(dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { us.Close(); tokens.Close(); bs.Close(); store.Close() })
	if err := bs.Add(context.Background(), "ci-deployer", nil); err != nil {
		t.Fatal(err)
	}
	engine, err := policy.New(context.Background(), policy.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { engine.Close() })
	prov, err := oidc.NewProvider(context.Background(), oidc.ProviderConfig{Issuer: p.URL, ClientID: "limen", ClientSecret: "s3cret",
		Mapping: oidc.DefaultMapping()})
	if err != nil {
		t.Fatal(err)
	}
	ci, err := oidc.Discover(context.Background(), p.URL, "limen", nil)
	if err != nil {
		t.Fatal(err)
	}
	pol := fakePolicy{}
	h, err := authapi.New(authapi.Config{CA: authority, Users: us, Tokens: tokens, Clusters: pol, Admin: pol, Logger: quiet,
		Audit: store, Locks: locks.NewSet(), OIDC: prov, Bots: bs, BotPolicy: engine,
		CI: []authapi.CIIssuer{{Name: "ci", Kind: bots.KindGitHub, Verifier: ci}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = authority.ServerTLSConfig()
	srv.Config.ErrorLog = slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return &oidcAPI{idp: p, authority: authority, store: store, proxy: strings.TrimPrefix(srv.URL, "https://")}
}

// login logs in through the API with do, which is given the API client, a
// CSR and a TTL.
func (e *oidcAPI) login(t *testing.T, do func(ctx context.Context, c *authapi.Client, csr, ttl string) (authapi.LoginResponse, error)) (*authapi.LoginResponse, error) {
	prof, _ := profile.Open(t.TempDir(), e.proxy)
	return prof.LoginWith(context.Background(), profile.Trust{Fingerprint: e.authority.Fingerprint()}, 0, do)
}

const oidcRedirect = "http://127.0.0.1:4711/callback"

// signIn signs email in with the code flow, the browser's part played over
// HTTP.
func (e *oidcAPI) signIn(t *testing.T, email string) (*authapi.LoginResponse, error) {
	return e.login(t, func(ctx context.Context, c *authapi.Client, csr, ttl string) (authapi.LoginResponse, error) {
		state, nonce, verifier := strings.Repeat("s", 20), strings.Repeat("n", 20), oauth2.GenerateVerifier()
		u, err := c.OIDCURL(ctx, authapi.OIDCURLRequest{RedirectURI: oidcRedirect, State: state, Nonce: nonce,
			CodeChallenge: oauth2.S256ChallengeFromVerifier(verifier)})
		if err != nil {
			return authapi.LoginResponse{}, err
		}
		back, err := idp.SignIn(u.URL, oidcRedirect, email, "pw")
		if err != nil {
			return authapi.LoginResponse{}, err
		}
		if back.Query().Get("state") != state {
			t.Fatalf("state %q", back.Query().Get("state"))
		}
		return c.OIDCLogin(ctx, authapi.OIDCLoginRequest{RedirectURI: oidcRedirect, Code: back.Query().Get("code"),
			CodeVerifier: verifier, Nonce: nonce, CSR: csr, TTL: ttl})
	})
}
