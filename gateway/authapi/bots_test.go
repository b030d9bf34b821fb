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
	"github.com/limenhq/limen/gateway/profile"
	"github.com/limenhq/limen/gateway/users"
)

// botEnv is the identity API with the bot directory.
type botEnv struct {
	proxy string
	ca    *ca.Authority
	audit *audit.Store
}

func setupBots(t *testing.T) *botEnv {
	t.Helper()
	dir := t.TempDir()
	quiet := slog.New(slog.DiscardHandler)
	e := &botEnv{}
	var err error
	if e.ca, err = ca.Open(ca.Options{DataDir: dir, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	us, err := users.Open(filepath.Join(dir, users.FileName), users.Options{Cost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	if e.audit, err = audit.Open(context.Background(), audit.Path(dir), audit.Options{Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	tokens, err := enroll.OpenTokenStore(filepath.Join(dir, enroll.TokenFileName), enroll.TokenStoreOptions{Audit: e.audit})
	if err != nil {
		t.Fatal(err)
	}
	bs, err := bots.Open(bots.Path(dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { us.Close(); tokens.Close(); bs.Close(); e.audit.Close() })
	pol := fakePolicy{clusters: []string{"prod"}}
	h, err := authapi.New(authapi.Config{CA: e.ca, Users: us, Tokens: tokens, Clusters: pol, Admin: pol, Logger: quiet,
		Audit: e.audit, Locks: locks.NewSet(), Bots: bs})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = e.ca.ServerTLSConfig()
	srv.Config.ErrorLog = slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	e.proxy = strings.TrimPrefix(srv.URL, "https://")
	us.Add(context.Background(), "root-admin", "admin-password", map[string][]string{"groups": {"admins"}})
	us.Add(context.Background(), "alice", "alice-password", map[string][]string{"groups": {"dev"}})
	return e
}

func (e *botEnv) client(t *testing.T, user, pw string) *authapi.Client {
	t.Helper()
	p, _ := profile.Open(t.TempDir(), e.proxy)
	if _, err := p.Login(context.Background(), profile.LoginRequest{User: user, Password: pw,
		Trust: profile.Trust{Fingerprint: e.ca.Fingerprint()}}); err != nil {
		t.Fatal(err)
	}
	creds, err := p.Credentials(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.Client(creds)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *botEnv) botLogin(t *testing.T, bot, secret string, ttl time.Duration) (*authapi.LoginResponse, error) {
	t.Helper()
	p, _ := profile.Open(t.TempDir(), e.proxy)
	return p.LoginWith(context.Background(), profile.Trust{Fingerprint: e.ca.Fingerprint()}, ttl,
		func(ctx context.Context, c *authapi.Client, csr, ttl string) (authapi.LoginResponse, error) {
			return c.BotLogin(ctx, authapi.BotLoginRequest{Bot: bot, Token: secret, CSR: csr, TTL: ttl})
		})
}

func TestBotsAdminAndSecretLogin(t *testing.T) {
	e := setupBots(t)
	ctx := context.Background()
	admin, alice := e.client(t, "root-admin", "admin-password"), e.client(t, "alice", "alice-password")

	if err := alice.AddBot(ctx, authapi.BotRequest{Name: "ci"}); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("a non-admin added a bot: %v", err)
	}
	if err := admin.AddBot(ctx, authapi.BotRequest{Name: "ci", Traits: map[string][]string{"team": {"web"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.BotToken(ctx, "ci", authapi.BotTokenRequest{TTL: "1h"}); err == nil {
		t.Fatal("a non-admin made a join secret")
	}
	tok, err := admin.BotToken(ctx, "ci", authapi.BotTokenRequest{TTL: "10m", Uses: 2})
	if err != nil {
		t.Fatal(err)
	}
	// The secret's creation is audited, without the secret.
	evs, err := e.audit.Search(ctx, audit.Query{Type: authapi.TypeBotToken})
	if err != nil || len(evs) != 1 || evs[0].Fields["secret_id"] != tok.Info.ID || evs[0].Fields["bot"] != "ci" {
		t.Fatalf("bot.token events %+v, %v", evs, err)
	}
	for k, v := range evs[0].Fields {
		if strings.Contains(tok.Token, v) && len(v) > 16 {
			t.Fatalf("audit field %s holds the secret", k)
		}
	}

	resp, err := e.botLogin(t, "ci", tok.Token, 0)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Principal.String() != "bot:ci" || resp.Principal.Traits["team"][0] != "web" {
		t.Fatalf("principal %+v", resp.Principal)
	}
	// The certificate does not outlive the secret.
	if resp.Expires.After(tok.Info.Expires) {
		t.Fatalf("certificate until %s, past the secret's %s", resp.Expires, tok.Info.Expires)
	}
	if _, err := e.botLogin(t, "other", tok.Token, 0); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("another bot's name: %v", err)
	}
	if _, err := e.botLogin(t, "ci", tok.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := e.botLogin(t, "ci", tok.Token, 0); err == nil || !strings.Contains(err.Error(), "used up") {
		t.Fatalf("third login with a two-use secret: %v", err)
	}

	if err := admin.RemoveBot(ctx, "ci"); err != nil {
		t.Fatal(err)
	}
	if err := admin.RemoveBot(ctx, "ci"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("second removal: %v", err)
	}
}
