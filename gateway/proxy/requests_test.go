package proxy_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/internal/apihttp"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/policy/policytest"
	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/requestapi"
	"github.com/limenhq/limen/gateway/requests"
)

var (
	reqBob   = identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "bob"}
	reqAlice = identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "alice", Traits: map[string][]string{"groups": {"dev"}}}
)

func (r *running) requestClient(t *testing.T, p identity.Principal) *requestapi.Client {
	t.Helper()
	return &requestapi.Client{Client: apihttp.Client{Proxy: r.addr, HTTP: httpClient(r.tlsConfig(t, &p, time.Hour), true)}}
}

// TestAccessRequestAPI drives /v1/requests through the proxy's port with
// the example policy: malformed and refused requests get the status that
// says so, an application's credential neither requests nor approves, and
// the certificate exchange carries only the caller's approved requests.
func TestAccessRequestAPI(t *testing.T) {
	r := startProxy(t, proxy.Config{})
	ctx := context.Background()
	bob, alice := r.requestClient(t, reqBob), r.requestClient(t, reqAlice)
	app := reqBob
	app.ClientID = "coffee-menu"
	bobApp := r.requestClient(t, app)

	for _, tt := range []struct {
		name string
		c    *requestapi.Client
		req  requestapi.CreateRequest
		code int
	}{
		{"unparsable duration", bob, requestapi.CreateRequest{Role: "edit-demo", Cluster: "demo", Duration: "soon", Reason: "x"}, http.StatusBadRequest},
		{"bad cluster name", bob, requestapi.CreateRequest{Role: "edit-demo", Cluster: "../demo", Duration: "1m", Reason: "x"}, http.StatusBadRequest},
		{"control bytes in the reason", bob, requestapi.CreateRequest{Role: "edit-demo", Cluster: "demo", Duration: "1m", Reason: "x\x1b[2J"}, http.StatusBadRequest},
		{"too long", bob, requestapi.CreateRequest{Role: "edit-demo", Cluster: "demo", Duration: "2h", Reason: "x"}, http.StatusForbidden},
		{"not requestable", bob, requestapi.CreateRequest{Role: "admin", Cluster: "demo", Duration: "1m", Reason: "x"}, http.StatusForbidden},
		{"through an application", bobApp, requestapi.CreateRequest{Role: "edit-demo", Cluster: "demo", Duration: "1m", Reason: "x"}, http.StatusForbidden},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.c.Create(ctx, tt.req); statusOf(err) != tt.code {
				t.Fatalf("Create = %v, want status %d", err, tt.code)
			}
		})
	}
	if _, err := bob.List(ctx, "bogus"); statusOf(err) != http.StatusBadRequest {
		t.Fatalf("List(state=bogus) = %v, want 400", err)
	}

	q, err := bob.Create(ctx, requestapi.CreateRequest{Role: "edit-demo", Cluster: "demo", Duration: "10m", Reason: "INC-9"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Approve(ctx, q.ID, ""); statusOf(err) != http.StatusForbidden {
		t.Fatalf("bob approving his own = %v, want 403", err)
	}
	aliceApp := reqAlice
	aliceApp.ClientID = "coffee-menu"
	if _, err := r.requestClient(t, aliceApp).Approve(ctx, q.ID, ""); statusOf(err) != http.StatusForbidden {
		t.Fatalf("alice approving through an application = %v, want 403", err)
	}
	if _, err := alice.Approve(ctx, "req-nosuch", ""); statusOf(err) != http.StatusNotFound {
		t.Fatalf("approving an unknown id = %v, want 404", err)
	}
	got, err := alice.Approve(ctx, q.ID, "ok")
	if err != nil || got.State != requests.StateApproved {
		t.Fatalf("alice approving = %+v, %v", got, err)
	}
	if _, err := alice.Approve(ctx, q.ID, "again"); statusOf(err) != http.StatusConflict {
		t.Fatalf("approving twice = %v, want 409", err)
	}

	// The exchange: bob's certificate carries his request; alice asking
	// for bob's id gets a certificate without it.
	key, _ := ca.NewKey()
	csr, _ := ca.NewCSR(key, "bob")
	resp, err := bob.Certificate(ctx, requestapi.CertificateRequest{CSR: string(csr), IDs: []string{q.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if p := certPrincipal(t, resp.Certificate); len(p.Requests) != 1 || p.Requests[0].Request != q.ID || p.Requests[0].Role != "edit-demo" ||
		!p.Requests[0].Expires.Equal(got.Expires.Truncate(time.Second)) {
		t.Fatalf("bob's exchanged certificate carries %+v, want %s until %s", p.Requests, q.ID, got.Expires)
	}
	akey, _ := ca.NewKey()
	acsr, _ := ca.NewCSR(akey, "alice")
	aresp, err := alice.Certificate(ctx, requestapi.CertificateRequest{CSR: string(acsr), IDs: []string{q.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if p := certPrincipal(t, aresp.Certificate); len(p.Requests) != 0 || len(aresp.Requests) != 0 {
		t.Fatalf("alice's certificate carries bob's request: %+v / %+v", p.Requests, aresp.Requests)
	}
	if _, err := bobApp.Certificate(ctx, requestapi.CertificateRequest{CSR: string(csr), IDs: []string{q.ID}}); statusOf(err) != http.StatusForbidden {
		t.Fatalf("an application's certificate asking to carry requests = %v, want 403", err)
	}

	// The requestable roles, and the clusters that have any.
	rq, err := bob.Requestable(ctx, "demo")
	if err != nil || rq.Roles["edit-demo"].MaxDuration != time.Hour {
		t.Fatalf("Requestable(demo) = %+v, %v", rq, err)
	}
	if cl, err := bob.Clusters(ctx); err != nil || len(cl) != 1 || cl[0] != "demo" {
		t.Fatalf("Clusters = %v, %v; want demo", cl, err)
	}
	evs, err := r.Audit.Search(ctx, audit.Query{Action: audit.ActionAccess})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, ev := range evs {
		reasons = append(reasons, ev.Principal.String()+"|"+ev.Denied.Reason)
	}
	for _, want := range []string{"user:bob|access request: role \"edit-demo\" may be requested for at most 1h0m0s",
		"user:bob|access request: you cannot approve your own request", "user:bob|access request through client coffee-menu"} {
		if !containsPrefix(reasons, want) {
			t.Errorf("no refusal %q audited; have %q", want, reasons)
		}
	}
}

func containsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

func certPrincipal(t *testing.T, certPEM string) identity.Principal {
	t.Helper()
	b, _ := pem.Decode([]byte(certPEM))
	if b == nil {
		t.Fatal("no certificate in the answer")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.PrincipalOfCert(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestNoGroupRefusalNamesRequests: a principal policy gives no group on a
// cluster, but lets request a role there, is told in kubectl's refusal
// which role and the command; one who may request nothing is not.
func TestNoGroupRefusalNamesRequests(t *testing.T) {
	data := policytest.ExampleData(t)
	cfg := policytest.Config(t, data)
	cfg["requests"].(map[string]any)["edit-demo"].(map[string]any)["requesters"] = map[string]any{"traits": map[string]any{"groups": []any{"oncall"}}}
	r := startProxy(t, proxy.Config{Policy: policy.Options{Bundle: policytest.Bundle(t, "1", data), InsecureSkipVerify: true}})
	oncall := identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "olga", Traits: map[string][]string{"groups": {"oncall"}}}
	nobody := identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "nobody"}
	for _, tt := range []struct {
		p    identity.Principal
		want string
	}{
		{oncall, `you may request access: limen request edit-demo --cluster demo --for 1h --reason "..." (at most 1h, 1 approval)`},
		{nobody, ""},
	} {
		c := httpClient(r.tlsConfig(t, &tt.p, time.Hour), true)
		resp, err := c.Get("https://" + r.addr + "/k8s/demo/api")
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var st struct{ Message string }
		_ = json.Unmarshal(raw, &st)
		body := st.Message
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%s: status %d, want 403", tt.p.Name, resp.StatusCode)
		}
		has := strings.Contains(body, "limen request")
		if tt.want == "" && has || tt.want != "" && !strings.Contains(body, tt.want) {
			t.Errorf("%s's refusal says %s; want %q", tt.p.Name, body, tt.want)
		}
	}
}
