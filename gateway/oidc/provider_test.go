package oidc_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/oidc"
	"github.com/limenhq/limen/test/idp"
)

const redirect = "http://127.0.0.1:1/callback"

func startIdP(t *testing.T) (*idp.IdP, *oidc.Provider) {
	t.Helper()
	p, err := idp.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.AddClient(idp.Client{ID: "limen", Secret: "s3cret", Redirects: []string{"http://127.0.0.1:*/callback"}})
	p.AddUser(idp.User{Email: "alice@example.com", Password: "pw", Groups: []string{"dev", "ops"}})
	prov, err := oidc.NewProvider(context.Background(), oidc.ProviderConfig{Issuer: p.URL, ClientID: "limen",
		ClientSecret: "s3cret", Mapping: oidc.DefaultMapping()})
	if err != nil {
		t.Fatal(err)
	}
	return p, prov
}

func codeFor(t *testing.T, p *idp.IdP, f oidc.Flow, verifier, email string) (string, error) {
	t.Helper()
	u, err := idp.SignIn(f.AuthCodeURL("st4te", "n0nce", verifier), redirect, email, "pw")
	if err != nil {
		return "", err
	}
	if u.Query().Get("state") != "st4te" {
		t.Fatalf("state %q came back, want st4te", u.Query().Get("state"))
	}
	return u.Query().Get("code"), nil
}

func TestCodeFlow(t *testing.T) {
	p, prov := startIdP(t)
	f := prov.Flow(redirect)
	verifier := oauth2.GenerateVerifier()
	code, err := codeFor(t, p, f, verifier, "alice@example.com")
	if err != nil {
		t.Fatal(err)
	}
	who, err := f.Exchange(context.Background(), code, verifier, "n0nce")
	if err != nil {
		t.Fatal(err)
	}
	if who.String() != "user:oidc:alice@example.com" || strings.Join(who.Traits["groups"], ",") != "dev,ops" {
		t.Fatalf("principal %+v", who)
	}
}

// TestCodeFlowPKCE: a code redeemed without the verifier its challenge was
// made from is refused by the provider.
func TestCodeFlowPKCE(t *testing.T) {
	p, prov := startIdP(t)
	f := prov.Flow(redirect)
	code, err := codeFor(t, p, f, oauth2.GenerateVerifier(), "alice@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Exchange(context.Background(), code, oauth2.GenerateVerifier(), "n0nce"); err == nil {
		t.Fatal("a code was redeemed with another PKCE verifier")
	}
}

// TestCodeFlowNonce: the ID token carries the login's nonce; an exchange
// expecting another one is refused by rule nonce.
func TestCodeFlowNonce(t *testing.T) {
	p, prov := startIdP(t)
	f := prov.Flow(redirect)
	verifier := oauth2.GenerateVerifier()
	code, err := codeFor(t, p, f, verifier, "alice@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Exchange(context.Background(), code, verifier, "other"); oidc.RuleOf(err) != oidc.RuleNonce {
		t.Fatalf("err %v, want rule nonce", err)
	}
}

func TestRemovedUser(t *testing.T) {
	p, prov := startIdP(t)
	p.RemoveUser("alice@example.com")
	if _, err := codeFor(t, p, prov.Flow(redirect), oauth2.GenerateVerifier(), "alice@example.com"); err == nil {
		t.Fatal("a removed user signed in")
	}
}

func TestDeviceFlow(t *testing.T) {
	p, prov := startIdP(t)
	da, err := prov.DeviceAuth(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(da.VerificationURI, p.URL) || da.UserCode == "" {
		t.Fatalf("device authorization %+v", da)
	}
	// Before approval the provider answers pending, which DeviceToken
	// returns once its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	_, err = prov.DeviceToken(ctx, da.DeviceCode, time.Second)
	cancel()
	if err != oidc.ErrPending {
		t.Fatalf("before approval: %v, want ErrPending", err)
	}
	if err := p.ApproveDevice(da.UserCode, "alice@example.com", "pw"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	who, err := prov.DeviceToken(ctx, da.DeviceCode, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if who.Name != "alice@example.com" || strings.Join(who.Traits["groups"], ",") != "dev,ops" {
		t.Fatalf("principal %+v", who)
	}
}

func TestWorkloadToken(t *testing.T) {
	p, _ := startIdP(t)
	raw, err := p.WorkloadToken("limen", "repo:acme/app:ref:refs/heads/main",
		map[string]any{"repository": "acme/app", "ref": "refs/heads/main"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	v, err := oidc.Discover(context.Background(), p.URL, "limen", nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := v.Verify(context.Background(), raw, "")
	if err != nil {
		t.Fatal(err)
	}
	if tok.Claims["repository"] != "acme/app" || tok.Client != "limen" {
		t.Fatalf("claims %v", tok.Claims)
	}
	if _, err := oidc.Discover(context.Background(), p.URL, "other", nil); err != nil {
		t.Fatal(err)
	}
}

// TestPreferredUsernameIsNotLocal signs in through the real test IdP as a
// person whose preferred_username is bob, with a provider the operator
// allowed to name people by that claim: the principal is the provider's
// bob (user:corp:bob), never the local user bob.
func TestPreferredUsernameIsNotLocal(t *testing.T) {
	p, err := idp.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.AddClient(idp.Client{ID: "limen", Secret: "s3cret", Redirects: []string{"http://127.0.0.1:*/callback"}})
	p.AddUser(idp.User{Email: "mallory@example.com", PreferredUsername: "bob", Password: "pw"})
	cfg := oidc.ProviderConfig{Issuer: p.URL, ClientID: "limen", ClientSecret: "s3cret", Name: "corp",
		Mapping: oidc.Mapping{Username: "preferred_username"}}
	if _, err := oidc.NewProvider(context.Background(), cfg); !errors.Is(err, oidc.ErrMutableUsername) {
		t.Fatalf("NewProvider with username preferred_username, not allowed: %v, want ErrMutableUsername", err)
	}
	cfg.Mapping.AllowMutableUsername = true
	prov, err := oidc.NewProvider(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := prov.Flow(redirect)
	verifier := oauth2.GenerateVerifier()
	code, err := codeFor(t, p, f, verifier, "mallory@example.com")
	if err != nil {
		t.Fatal(err)
	}
	who, err := f.Exchange(context.Background(), code, verifier, "n0nce")
	if err != nil {
		t.Fatal(err)
	}
	local := identity.Principal{Kind: identity.KindUser, Name: "bob"}
	if who.Name != "bob" || who.Issuer != "corp" || who.Same(local) || who.String() != "user:corp:bob" {
		t.Fatalf("principal %+v (%s): want the provider's bob, user:corp:bob", who, who)
	}
}
