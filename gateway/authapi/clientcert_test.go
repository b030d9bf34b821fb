package authapi_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/identity"
)

// registry stands in for the policy's client registry.
type registry []string

func (r registry) Registered(_ context.Context, c string) (bool, error) {
	return slices.Contains(r, c), nil
}

// TestClientCertificate: a login is client kubectl; its certificate can be
// exchanged for one bound to a registered application, for the same user
// and login and no longer; an application's certificate cannot mint
// another's, and an unregistered, malformed or built-in client is refused.
func TestClientCertificate(t *testing.T) {
	e := setup(t)
	p, login := e.login(t, "alice", "alice-password")
	if login.Principal.ClientID != identity.ClientKubectl {
		t.Fatalf("a password login names client %q, want kubectl", login.Principal.ClientID)
	}
	app, err := p.AppCredentials(context.Background(), "coffee-menu", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got := app.Principal
	if got.ClientID != "coffee-menu" || got.Name != "alice" || got.LoginID != login.Principal.LoginID || app.Cert.NotAfter.After(login.Cert.NotAfter) {
		t.Fatalf("app certificate %+v until %v (login until %v)", got, app.Cert.NotAfter, login.Cert.NotAfter)
	}
	again, err := p.AppCredentials(context.Background(), "coffee-menu", time.Now())
	if err != nil || !again.Cert.Equal(app.Cert) {
		t.Fatalf("the stored app certificate was not reused: %v", err)
	}
	c, _ := p.Client(login)
	key, _ := ca.NewKey()
	csr, _ := ca.NewCSR(key, "alice")
	for _, tt := range []struct {
		client string
		code   int
	}{
		{"other-app", http.StatusForbidden},
		{"kubectl", http.StatusBadRequest},
		{"console", http.StatusBadRequest},
		{"Coffee-Menu", http.StatusBadRequest},
		{"coffee-menu,other", http.StatusBadRequest},
		{"", http.StatusBadRequest},
	} {
		if _, err := c.ClientCert(context.Background(), authapi.ClientCertRequest{Client: tt.client, CSR: string(csr)}); !isStatus(err, tt.code) {
			t.Errorf("client %q: %v, want %d", tt.client, err, tt.code)
		}
	}
	appClient, _ := p.Client(app)
	_, err = appClient.ClientCert(context.Background(), authapi.ClientCertRequest{Client: "coffee-menu", CSR: string(csr)})
	if !isStatus(err, http.StatusForbidden) || !strings.Contains(err.Error(), "client kubectl") {
		t.Fatalf("an app certificate asked for another: %v", err)
	}
}
