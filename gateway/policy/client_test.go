package policy

import (
	"context"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/reqinfo"
)

// clientData registers kubectl (unscoped), an application scoped to one
// resource, with its own role, and nothing else.
func clientData() map[string]any {
	d := exampleData(map[string]any{
		"cli": role([]any{"limen:edit"}, map[string]any{"name": "*"}),
		"app": map[string]any{"groups": []any{"limen:app"}, "clusters": []any{map[string]any{"name": "*"}}, "clients": []any{"coffee-menu"}},
	}, map[string]any{"bob": []any{"cli", "app"}})
	cfg := d["limen"].(map[string]any)["config"].(map[string]any)
	cfg["clients"] = map[string]any{
		"kubectl": map[string]any{"unscoped": true},
		"coffee-menu": map[string]any{"userPrefix": "coffee:", "scope": []any{map[string]any{
			"group": "", "version": "v1", "resource": "configmaps", "namespaces": []any{"menus"}, "verbs": []any{"get"}}}},
	}
	return d
}

func clientEngine(t *testing.T, data map[string]any) (*Engine, error) {
	t.Helper()
	priv, pub := testKeys(t)
	raw := buildBundle(t, "1", defaultRego(t), data, priv)
	return New(context.Background(), Options{Bundle: raw, PublicKeyPEM: pub, Logger: quietLogger()})
}

// TestClientDecidesGroups: each client gets the groups of the roles that
// serve it, and a credential whose client is missing, empty, unknown or
// malformed gets nothing, never kubectl's groups.
func TestClientDecidesGroups(t *testing.T) {
	e, err := clientEngine(t, clientData())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tests := []struct {
		client string
		want   string
	}{
		{"kubectl", "limen:edit"},
		{"coffee-menu", "limen:app"},
		{"", ""},
		{"console", ""},
		{"unknown-app", ""},
		{"Kubectl", ""},
		{"kubectl ", ""},
		{"kubectl,coffee-menu", ""},
	}
	for _, tt := range tests {
		p := identity.Principal{Kind: identity.KindUser, Name: "bob", ClientID: tt.client}
		// Twice: the second answer is the cache's, which must be keyed by
		// client too.
		for range 2 {
			d, err := e.Groups(ctx, p, Cluster{Name: "demo"})
			if err != nil {
				t.Fatalf("client %q: %v", tt.client, err)
			}
			if got := strings.Join(d.Groups, ","); got != tt.want {
				t.Fatalf("client %q: groups %q, want %q", tt.client, got, tt.want)
			}
			if (d.Scope != nil) != (tt.want != "") {
				t.Fatalf("client %q: scope %v with groups %q", tt.client, d.Scope, d.Groups)
			}
		}
		names, err := e.Clusters(ctx, p, []Cluster{{Name: "demo"}})
		if err != nil || (len(names) > 0) != (tt.want != "") {
			t.Fatalf("client %q: clusters %v, %v", tt.client, names, err)
		}
	}
}

// TestScopeFromTheBundle: the decision carries the client's compiled scope,
// and Scope (the worker's re-check) gives the same from its own snapshot.
func TestScopeFromTheBundle(t *testing.T) {
	e, err := clientEngine(t, clientData())
	if err != nil {
		t.Fatal(err)
	}
	p := identity.Principal{Kind: identity.KindUser, Name: "bob", ClientID: "coffee-menu"}
	d, err := e.Groups(context.Background(), p, Cluster{Name: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	in := &reqinfo.Info{IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "configmaps", Namespace: "menus", Name: "m"}
	out := &reqinfo.Info{IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "secrets", Namespace: "menus", Name: "m"}
	if !d.Scope.Allows(in, "") || d.Scope.Allows(out, "") || d.Scope.UserPrefix != "coffee:" {
		t.Fatalf("decision scope %+v", d.Scope)
	}
	sc, ok, rev, err := e.Scope("coffee-menu")
	if err != nil || !ok || rev != "1" || !sc.Allows(in, "") || sc.Allows(out, "") {
		t.Fatalf("Scope = %+v, %v, %q, %v", sc, ok, rev, err)
	}
	if sc, ok, _, _ := e.Scope("nobody"); ok || sc != nil {
		t.Fatal("an unregistered client has a scope")
	}
	if kc, _, _, _ := e.Scope("kubectl"); !kc.Unscoped() {
		t.Fatal("kubectl is not unscoped")
	}
}

// TestBadScopeRefusesTheBundle: a scope list Limen cannot compile keeps the
// bundle from activating, with a message naming the key.
func TestBadScopeRefusesTheBundle(t *testing.T) {
	d := clientData()
	cfg := d["limen"].(map[string]any)["config"].(map[string]any)
	cfg["clients"].(map[string]any)["coffee-menu"].(map[string]any)["scope"].([]any)[0].(map[string]any)["verbs"] = []any{"lst"}
	_, err := clientEngine(t, d)
	if err == nil || !strings.Contains(err.Error(), "data.limen.config.clients.coffee-menu.scope[0].verbs[0]") {
		t.Fatalf("bundle with a bad verb: %v", err)
	}
}
