package worker_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/grant"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/scope"
)

// scopes stands in for the worker's own policy's client registry, compiled
// by the real parser (the engine's Scope is tested in gateway/policy), at
// keepGroups' revision unless told another.
type scopes struct {
	set      *scope.Set
	revision string
}

func (s scopes) Scope(client string) (*scope.Scope, bool, string, error) {
	sc, ok := s.set.Client(client)
	if s.revision == "" {
		return sc, ok, "rev-test", nil
	}
	return sc, ok, s.revision, nil
}

func scopedBench(t *testing.T) *bench {
	t.Helper()
	set, err := scope.ParseJSON([]byte(`{
	  "kubectl": {"unscoped": true},
	  "app": {"userPrefix": "app:", "scope": [
	    {"group": "", "version": "v1", "resource": "configmaps", "namespaces": ["menus"], "verbs": ["list"]}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	b := newBench(t)
	b.h.Scopes = scopes{set: set}
	return b
}

// TestGroupsAndScopeFromOnePolicy: groups decided by one bundle and a scope
// read from the next are refused (503), never combined.
func TestGroupsAndScopeFromOnePolicy(t *testing.T) {
	b := scopedBench(t)
	b.h.Scopes = scopes{set: b.h.Scopes.(scopes).set, revision: "rev-next"}
	tok, _ := b.grant(func(g *grant.Grant) { g.Principal.ClientID = "app" })
	req, _ := http.NewRequest(http.MethodGet, "/api/v1/namespaces/menus/configmaps", nil)
	if _, resp, body := b.serve(tok, req); resp.StatusCode != http.StatusServiceUnavailable || len(b.seen()) != 0 {
		t.Fatalf("%d %s, want 503 and nothing forwarded", resp.StatusCode, body)
	}
}

// TestWorkerChecksScopeAgain: the worker matches each request against its
// own policy's scope for the grant's client, whatever the proxy decided: out
// of scope is its own 403 with the scope reason, audited auth.denied at the
// worker, and nothing reaches the API server; a client its policy does not
// register, or a grant naming none, gets nothing.
func TestWorkerChecksScopeAgain(t *testing.T) {
	tests := []struct {
		name, client, path, reason, statusReason string
	}{
		{"other resource", "app", "/api/v1/namespaces/menus/secrets", "scope: ", scope.Reason},
		{"watch where list is listed", "app", "/api/v1/namespaces/menus/configmaps?watch=true", "scope: ", scope.Reason},
		{"exec", "app", "/api/v1/namespaces/menus/pods/p/exec?command=sh", "scope: ", scope.Reason},
		{"discovery", "app", "/apis", "scope: ", scope.Reason},
		{"unregistered", "other-app", "/api/v1/namespaces/menus/configmaps", "client: other-app is not registered", "Forbidden"},
		{"no client", "", "/api/v1/namespaces/menus/configmaps", "client: the credential names no client", "Forbidden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := scopedBench(t)
			tok, _ := b.grant(func(g *grant.Grant) { g.Principal.ClientID = tt.client })
			req, _ := http.NewRequest(http.MethodGet, tt.path, nil)
			ev, resp, body := b.serve(tok, req)
			var st metav1.Status
			_ = json.Unmarshal([]byte(body), &st)
			if resp.StatusCode != http.StatusForbidden || string(st.Reason) != tt.statusReason {
				t.Fatalf("%d %s, want 403 with reason %s", resp.StatusCode, body, tt.statusReason)
			}
			if tt.statusReason == scope.Reason && !strings.Contains(st.Message, scope.Phrase) {
				t.Fatalf("message %q does not say %q", st.Message, scope.Phrase)
			}
			if ev.Type != audit.TypeAuthDenied || ev.Denied.Hop != audit.HopWorker || !strings.HasPrefix(ev.Denied.Reason, tt.reason) {
				t.Fatalf("event %+v, want the worker's auth.denied with %q", ev.Denied, tt.reason)
			}
			if len(b.seen()) != 0 {
				t.Fatalf("the API server saw %v", b.seen())
			}
		})
	}
}

// TestWorkerImpersonatesTheClientsName: in scope, the request goes upstream
// as the client's own user name (per-client identity); kubectl's keeps the
// plain one.
func TestWorkerImpersonatesTheClientsName(t *testing.T) {
	for client, user := range map[string]string{"app": "app:alice", identity.ClientKubectl: "alice"} {
		b := scopedBench(t)
		tok, _ := b.grant(func(g *grant.Grant) { g.Principal.ClientID = client })
		req, _ := http.NewRequest(http.MethodGet, "/api/v1/namespaces/menus/configmaps", nil)
		ev, resp, body := b.serve(tok, req)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", client, resp.StatusCode, body)
		}
		seen := b.seen()
		if len(seen) != 1 || seen[0].header.Get("Impersonate-User") != user {
			t.Fatalf("%s: the API server saw %v, want user %s", client, seen, user)
		}
		if ev.Principal.ClientID != client {
			t.Fatalf("%s: kube.request names client %q", client, ev.Principal.ClientID)
		}
	}
}

// TestAccessReviewGrant: a grant for the proxy's access review carries the
// SelfSubjectRulesReview whatever the client's scope, and nothing else.
func TestAccessReviewGrant(t *testing.T) {
	b := scopedBench(t)
	tok, _ := b.grant(func(g *grant.Grant) { g.Principal.ClientID = "app"; g.Purpose = grant.PurposeAccessReview })
	req, _ := http.NewRequest(http.MethodPost, "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", strings.NewReader(`{}`))
	if _, resp, body := b.serve(tok, req); resp.StatusCode != http.StatusOK {
		t.Fatalf("the rules review: %d %s", resp.StatusCode, body)
	}
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/api/v1/namespaces/menus/configmaps"}, // in scope, but not the review
		{http.MethodPost, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"},
		{http.MethodPost, "/api/v1/namespaces/menus/secrets"},
	} {
		b := scopedBench(t)
		tok, _ := b.grant(func(g *grant.Grant) { g.Principal.ClientID = "app"; g.Purpose = grant.PurposeAccessReview })
		req, _ := http.NewRequest(r.method, r.path, strings.NewReader(`{}`))
		ev, resp, body := b.serve(tok, req)
		if resp.StatusCode != http.StatusForbidden || ev.Type != audit.TypeAuthDenied || len(b.seen()) != 0 {
			t.Fatalf("%s %s under an access-review grant: %d %s", r.method, r.path, resp.StatusCode, body)
		}
	}
}
