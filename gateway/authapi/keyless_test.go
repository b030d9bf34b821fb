package authapi_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

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

// TestKeylessBotLogin logs the example data's bot ci-deployer in with CI
// tokens from the real test IdP, trusted as the GitHub-kind issuer "ci",
// decided by the real embedded policy: a token logs in once (its jti is
// remembered until it expires), a token without jti is refused, and a
// token of another owner (repository_owner_id) is refused although its
// repository name and ref match.
func TestKeylessBotLogin(t *testing.T) {
	p, err := idp.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
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
	v, err := oidc.Discover(context.Background(), p.URL, "limen", nil)
	if err != nil {
		t.Fatal(err)
	}
	pol := fakePolicy{}
	h, err := authapi.New(authapi.Config{CA: authority, Users: us, Tokens: tokens, Clusters: pol, Admin: pol, Logger: quiet,
		Audit: store, Locks: locks.NewSet(), Bots: bs, BotPolicy: engine,
		CI: []authapi.CIIssuer{{Name: "ci", Kind: bots.KindGitHub, Verifier: v}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = authority.ServerTLSConfig()
	srv.Config.ErrorLog = slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	proxyAddr := strings.TrimPrefix(srv.URL, "https://")

	main := map[string]any{"repository_owner_id": "1000001", "repository": "limenhq/demo", "ref": "refs/heads/main"}
	mint := func(extra map[string]any) string {
		claims := map[string]any{}
		for k, v := range main {
			claims[k] = v
		}
		for k, v := range extra {
			claims[k] = v
		}
		tok, err := p.WorkloadToken("limen", "repo:limenhq/demo:ref:refs/heads/main", claims, 5*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	login := func(tok string) error {
		t.Helper()
		pr, _ := profile.Open(t.TempDir(), proxyAddr)
		_, err := pr.LoginWith(context.Background(), profile.Trust{Fingerprint: authority.Fingerprint()}, 0,
			func(ctx context.Context, c *authapi.Client, csr, ttl string) (authapi.LoginResponse, error) {
				return c.BotOIDCLogin(ctx, authapi.BotOIDCLoginRequest{Bot: "ci-deployer", IDToken: tok, CSR: csr, TTL: ttl})
			})
		return err
	}

	tok := mint(nil)
	if err := login(tok); err != nil {
		t.Fatalf("first login with a matching token: %v", err)
	}
	if err := login(tok); err == nil || !strings.Contains(err.Error(), "used before") {
		t.Fatalf("the same token again: %v, want a refusal as replayed", err)
	}
	if err := login(mint(nil)); err != nil {
		t.Fatalf("a fresh token of the same job: %v", err)
	}
	if err := login(mint(map[string]any{"jti": nil})); err == nil || !strings.Contains(err.Error(), "no jti") {
		t.Fatalf("a token without jti: %v", err)
	}
	if err := login(mint(map[string]any{"repository_owner_id": "666"})); err == nil || !strings.Contains(err.Error(), "policy does not let") {
		t.Fatalf("another owner's repository of the same name: %v", err)
	}
	evs, err := store.Search(context.Background(), audit.Query{Type: audit.TypeAuthDenied})
	if err != nil || len(evs) != 3 {
		t.Fatalf("auth.denied events: %d, %v; want the three refusals", len(evs), err)
	}
}
