package proxy_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/adminapi"
	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/internal/apihttp"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/policy/policytest"
	"github.com/limenhq/limen/gateway/proxy"
)

// withApp is the example data with one more registered client,
// coffee-menu, which no role lets administer.
func withApp(t *testing.T) policy.Options {
	data := policytest.ExampleData(t)
	clients := policytest.Config(t, data)["clients"].(map[string]any)
	clients["coffee-menu"] = map[string]any{"description": "a browser application", "scope": []any{}}
	return policy.Options{Bundle: policytest.Bundle(t, "1", data), InsecureSkipVerify: true}
}

// appClients trades kubectl's certificate, through the proxy's own
// /v1/client-certificate, for one bound to client, and returns the API
// clients that present it.
func (r *running) appClients(t *testing.T, kubectl apiClients, client string) apiClients {
	t.Helper()
	key, err := ca.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := ca.NewCSR(key, "ignored")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := kubectl.ClientCert(context.Background(), authapi.ClientCertRequest{Client: client, CSR: string(csr)})
	if err != nil {
		t.Fatalf("exchange for a %s certificate: %v", client, err)
	}
	if resp.Principal.ClientID != client {
		t.Fatalf("the exchanged certificate names client %q, want %q", resp.Principal.ClientID, client)
	}
	block, _ := pem.Decode([]byte(resp.Certificate))
	if block == nil {
		t.Fatal("the exchanged certificate is not PEM")
	}
	if _, err := x509.ParseCertificate(block.Bytes); err != nil {
		t.Fatal(err)
	}
	cfg := r.tlsConfig(t, nil, 0)
	cfg.Certificates = []tls.Certificate{{Certificate: [][]byte{block.Bytes}, PrivateKey: key}}
	c := &authapi.Client{Client: apihttp.Client{Proxy: r.addr, HTTP: httpClient(cfg, true)}}
	return apiClients{Client: c, admin: adminapi.NewClient(c)}
}

// TestAppCertificateIsNeverAdmin: alice is an administrator; a certificate
// she trades for the coffee-menu application is not. With it, every admin
// call is refused with 403 and stored as auth.denied naming the client, and
// none takes effect; the same calls with her kubectl certificate pass the
// admin check.
func TestAppCertificateIsNeverAdmin(t *testing.T) {
	r := startProxy(t, proxy.Config{Policy: withApp(t)})
	ctx := context.Background()
	alice := identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "alice",
		Traits: map[string][]string{"groups": {"admins"}}, LoginID: "login-1"}
	kubectl := r.clients(t, alice, time.Hour)
	if err := kubectl.AddBot(ctx, authapi.BotRequest{Name: "ci"}); err != nil {
		t.Fatalf("kubectl certificate adds a bot: %v", err)
	}
	app := r.appClients(t, kubectl, "coffee-menu")
	bob := locks.Target{Kind: identity.KindUser, Name: "bob"}

	calls := []struct {
		action string
		call   func(apiClients) error
	}{
		{"tokens.create", func(c apiClients) error {
			_, err := c.CreateToken(ctx, authapi.TokenRequest{Cluster: testCluster})
			return err
		}},
		{"sessions.list", func(c apiClients) error { _, err := c.admin.Sessions(ctx); return err }},
		{"users.add", func(c apiClients) error {
			return c.AddUser(ctx, authapi.UserRequest{Name: "mallory", Password: "mallory-password", Traits: map[string][]string{"groups": {"admins"}}})
		}},
		{"bots.token", func(c apiClients) error {
			_, err := c.BotToken(ctx, "ci", authapi.BotTokenRequest{TTL: "1h"})
			return err
		}},
		{"user.lock", func(c apiClients) error {
			_, err := c.admin.Lock(ctx, adminapi.LockRequest{Target: bob, Reason: "from a browser"})
			return err
		}},
		{"session.kill", func(c apiClients) error { _, err := c.admin.Kill(ctx, "s-none"); return err }},
	}
	for _, c := range calls {
		err := c.call(app)
		if statusOf(err) != http.StatusForbidden || !strings.Contains(err.Error(), "coffee-menu") {
			t.Errorf("app certificate's %s: %v, want 403 naming the client", c.action, err)
		}
	}
	got := r.adminRefusals(t)
	if len(got) != len(calls) {
		t.Fatalf("auth.denied with action admin:\n%s\nwant %d", strings.Join(got, "\n"), len(calls))
	}
	for i, c := range calls {
		if !strings.HasPrefix(got[i], "user:alice|admin action "+c.action+" not allowed") || !strings.Contains(got[i], "coffee-menu") {
			t.Errorf("refusal %d: %q, want one of %s naming coffee-menu", i, got[i], c.action)
		}
	}
	if ts, err := r.Tokens.List(ctx); err != nil || len(ts) != 0 {
		t.Fatalf("join tokens after the app's mint: %+v, %v", ts, err)
	}
	if us, err := r.Users.List(ctx); err != nil || len(us) != 0 {
		t.Fatalf("users after the app's add: %+v, %v", us, err)
	}
	if _, ok := r.LockSet.Locked(identity.Principal{Kind: identity.KindUser, Name: "bob"}, time.Now()); ok {
		t.Fatal("the app's lock took effect")
	}

	// The same calls with the kubectl certificate pass the admin check
	// (the kill names no session, so it is a 404 after the check).
	for _, c := range calls {
		err := c.call(kubectl)
		if c.action == "session.kill" {
			if statusOf(err) != http.StatusNotFound {
				t.Errorf("kubectl certificate's %s: %v, want 404 past the admin check", c.action, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("kubectl certificate's %s: %v", c.action, err)
		}
	}
}
