package proxy_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/scope"
)

// refused checks that the proxy answered 403 itself, forwarded nothing and
// audited one auth.denied whose reason starts with reason; it returns the
// Status it answered.
func refused(t *testing.T, f *front, path, reason string) metav1.Status {
	t.Helper()
	code, body := f.get(t, path, nil)
	var st metav1.Status
	_ = json.Unmarshal([]byte(body), &st)
	if code != http.StatusForbidden {
		t.Fatalf("%d %s, want 403", code, body)
	}
	select {
	case r := <-f.worker.got:
		t.Fatalf("the worker got %s", r.URL)
	default:
	}
	denied := f.events(t, audit.TypeAuthDenied)
	if len(denied) != 1 || !strings.HasPrefix(denied[0].Denied.Reason, reason) {
		t.Fatalf("auth.denied %+v, want one with reason %q", denied, reason)
	}
	return st
}

// TestClientMustBeOneKnownClient: a credential whose client is missing,
// empty, malformed (which could be read as two clients, or as another) or
// unknown to the policy gets nothing — not kubectl's groups, which the
// real embedded policy would give alice.
func TestClientMustBeOneKnownClient(t *testing.T) {
	engine, err := policy.New(context.Background(), policy.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { engine.Close() })
	tests := []struct {
		name, client, reason, msg string
	}{
		{"missing", "", "client", "names no client"},
		{"upper case", "Kubectl", "client", "only lower-case"},
		{"two clients", "kubectl,console", "client", "only lower-case"},
		{"two clients spaced", "kubectl console", "client", "only lower-case"},
		{"padded", " kubectl", "client", "only lower-case"},
		{"trailing newline", "kubectl\n", "client", "only lower-case"},
		{"leading hyphen", "-kubectl", "client", "hyphen"},
		{"too long", strings.Repeat("k", 64), "client", "longer than"},
		{"unknown to the policy", "coffee-menu", "client: coffee-menu is not registered", "does not register the client"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFront(t)
			f.kube.Policy = engine
			p := identity.Principal{Kind: identity.KindUser, Name: "alice", Traits: map[string][]string{"groups": {"dev"}}, ClientID: tt.client}
			f.kube.Authenticate = func(*http.Request) (identity.Principal, time.Time, error) { return p, time.Now().Add(time.Hour), nil }
			st := refused(t, f, "/k8s/demo/api/v1/namespaces/default/pods", tt.reason)
			if !strings.Contains(st.Message, tt.msg) {
				t.Fatalf("message %q, want %q", st.Message, tt.msg)
			}
		})
	}
	// The same principal as kubectl is granted: the refusals above are the
	// client's, not alice's.
	f := newFront(t)
	f.kube.Policy = engine
	if code, body := f.get(t, "/k8s/demo/api/v1/namespaces/default/pods", nil); code != http.StatusOK {
		t.Fatalf("alice through kubectl: %d %s", code, body)
	}
}

const appScope = `{"app": {"scope": [
  {"group": "", "version": "v1", "resource": "configmaps", "namespaces": ["menus"], "verbs": ["get", "list"]}
]}}`

func appFront(t *testing.T, groups []string) *front {
	t.Helper()
	set, err := scope.ParseJSON([]byte(appScope))
	if err != nil {
		t.Fatal(err)
	}
	sc, _ := set.Client("app")
	f := newFront(t)
	f.kube.Policy = fixedPolicy{groups: groups, scope: sc}
	p := alice
	p.ClientID = "app"
	f.kube.Authenticate = func(*http.Request) (identity.Principal, time.Time, error) { return p, time.Now().Add(time.Hour), nil }
	return f
}

// TestScopeRefusesAtTheProxy: out of scope is a 403 the proxy answers with
// its own Status reason, audited as auth.denied with reason scope; in scope
// is forwarded.
func TestScopeRefusesAtTheProxy(t *testing.T) {
	for _, path := range []string{
		"/k8s/demo/api/v1/namespaces/menus/secrets",
		"/k8s/demo/api/v1/namespaces/other/configmaps",
		"/k8s/demo/api/v1/namespaces/menus/configmaps?watch=true",
		"/k8s/demo/api",
	} {
		f := appFront(t, []string{"limen:edit"})
		st := refused(t, f, path, "scope: ")
		if st.Reason != scope.Reason || !strings.Contains(st.Message, scope.Phrase) || st.Code != http.StatusForbidden {
			t.Fatalf("%s: Status %+v, want reason %s and %q", path, st, scope.Reason, scope.Phrase)
		}
	}
	f := appFront(t, []string{"limen:edit"})
	if code, body := f.get(t, "/k8s/demo/api/v1/namespaces/menus/configmaps", nil); code != http.StatusOK {
		t.Fatalf("in scope: %d %s", code, body)
	}
	if g := <-f.worker.grants; g.Principal.ClientID != "app" {
		t.Fatalf("grant for client %q, want app", g.Principal.ClientID)
	}
}

// TestScopeOnlySubtracts: a request the scope lists gets no group the
// policy did not grant; with none, it is refused as before.
func TestScopeOnlySubtracts(t *testing.T) {
	f := appFront(t, nil)
	refused(t, f, "/k8s/demo/api/v1/namespaces/menus/configmaps", "policy grants no group")
	f = appFront(t, []string{"limen:view"})
	if code, _ := f.get(t, "/k8s/demo/api/v1/namespaces/menus/configmaps", nil); code != http.StatusOK {
		t.Fatal("in scope refused")
	}
	if g := <-f.worker.grants; strings.Join(g.Groups, ",") != "limen:view" {
		t.Fatalf("granted %v, want only the policy's limen:view", g.Groups)
	}
}
