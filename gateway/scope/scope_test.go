package scope

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/kpath"
	"github.com/limenhq/limen/gateway/reqinfo"
)

// coffee is docs/POLICY.md's example: one application scoped to its CRD in two
// namespaces, and to its pods' logs in one.
const coffee = `{
  "kubectl": {"unscoped": true},
  "empty": {"description": "registered, with an empty scope"},
  "empty-list": {"scope": [], "nonResourceURLs": []},
  "coffee-menu": {
    "userPrefix": "coffee:",
    "scope": [
      {"group": "menus.example.com", "version": "v1", "resource": "coffeemenus",
       "namespaces": ["team-a", "team-b"], "verbs": ["get", "list", "create"]},
      {"group": "", "version": "v1", "resource": "pods", "subresources": ["log"],
       "namespaces": ["team-a"], "verbs": ["get"]},
      {"group": "", "version": "v1", "resource": "namespaces", "verbs": ["list"]},
      {"group": "menus.example.com", "version": "v1", "resource": "roasts",
       "namespaces": ["*"], "verbs": ["watch"]}
    ],
    "nonResourceURLs": ["/version", "/openapi/*"]
  }
}`

func mustSet(t testing.TB, doc string) *Set {
	t.Helper()
	s, err := ParseJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// classify reads a request the way both hops do: kpath, then reqinfo.
func classify(t testing.TB, method, target string) (*reqinfo.Info, string) {
	t.Helper()
	r := httptest.NewRequest(method, target, nil)
	raw, _, _ := strings.Cut(r.RequestURI, "?")
	p, err := kpath.Parse(raw)
	if err != nil {
		t.Fatalf("kpath.Parse(%q): %v", raw, err)
	}
	info, err := reqinfo.Classify(r, p)
	if err != nil {
		t.Fatalf("classify %s %s: %v", method, target, err)
	}
	return &info, p.String()
}

func TestAllows(t *testing.T) {
	set := mustSet(t, coffee)
	menus := "/apis/menus.example.com/v1/namespaces/team-a/coffeemenus"
	tests := []struct {
		name, client, method, target string
		want                         bool
	}{
		// The entry itself.
		{"list in scope", "coffee-menu", "GET", menus, true},
		{"get in scope", "coffee-menu", "GET", menus + "/latte", true},
		{"create in scope", "coffee-menu", "POST", menus, true},
		{"second namespace", "coffee-menu", "GET", "/apis/menus.example.com/v1/namespaces/team-b/coffeemenus", true},
		// Default deny.
		{"other namespace", "coffee-menu", "GET", "/apis/menus.example.com/v1/namespaces/team-c/coffeemenus", false},
		{"across all namespaces", "coffee-menu", "GET", "/apis/menus.example.com/v1/coffeemenus", false},
		{"other resource", "coffee-menu", "GET", "/api/v1/namespaces/team-a/secrets", false},
		{"other group", "coffee-menu", "GET", "/apis/other.example.com/v1/namespaces/team-a/coffeemenus", false},
		{"unlisted verb update", "coffee-menu", "PUT", menus + "/latte", false},
		{"unlisted verb delete", "coffee-menu", "DELETE", menus + "/latte", false},
		// Verbs from the request, not the method.
		{"watch is not list", "coffee-menu", "GET", menus + "?watch=true", false},
		{"watch spelled 1", "coffee-menu", "GET", menus + "?watch=1", false},
		{"legacy watch path", "coffee-menu", "GET", "/apis/menus.example.com/v1/watch/namespaces/team-a/coffeemenus", false},
		{"listed watch", "coffee-menu", "GET", "/apis/menus.example.com/v1/namespaces/x/roasts?watch=true", true},
		{"list is not watch", "coffee-menu", "GET", "/apis/menus.example.com/v1/namespaces/x/roasts", false},
		{"deletecollection is not delete", "coffee-menu", "DELETE", menus, false},
		// Alternate versions are separate entries.
		{"v1beta1 not covered by v1", "coffee-menu", "GET", "/apis/menus.example.com/v1beta1/namespaces/team-a/coffeemenus", false},
		// Subresources are off unless listed.
		{"status not listed", "coffee-menu", "GET", menus + "/latte/status", false},
		{"log listed", "coffee-menu", "GET", "/api/v1/namespaces/team-a/pods/web/log", true},
		{"log follow listed", "coffee-menu", "GET", "/api/v1/namespaces/team-a/pods/web/log?follow=true", true},
		{"pod itself covered", "coffee-menu", "GET", "/api/v1/namespaces/team-a/pods/web", true},
		{"log in other namespace", "coffee-menu", "GET", "/api/v1/namespaces/team-b/pods/web/log", false},
		// The same list governs streams.
		{"exec POST", "coffee-menu", "POST", "/api/v1/namespaces/team-a/pods/web/exec?command=sh", false},
		{"exec GET (websocket)", "coffee-menu", "GET", "/api/v1/namespaces/team-a/pods/web/exec?command=sh", false},
		{"attach", "coffee-menu", "POST", "/api/v1/namespaces/team-a/pods/web/attach", false},
		{"portforward", "coffee-menu", "POST", "/api/v1/namespaces/team-a/pods/web/portforward", false},
		{"pod proxy", "coffee-menu", "GET", "/api/v1/namespaces/team-a/pods/web/proxy/metrics", false},
		{"service proxy", "coffee-menu", "GET", "/api/v1/namespaces/team-a/services/web:80/proxy/x", false},
		{"node proxy", "coffee-menu", "GET", "/api/v1/nodes/n1/proxy/metrics", false},
		// Cluster-level entries.
		{"cluster-level list", "coffee-menu", "GET", "/api/v1/namespaces", true},
		{"namespace get not listed", "coffee-menu", "GET", "/api/v1/namespaces/team-a", false},
		// Discovery grants nothing, and is itself only what is listed.
		{"discovery /apis", "coffee-menu", "GET", "/apis", false},
		{"discovery /api", "coffee-menu", "GET", "/api", false},
		{"group discovery", "coffee-menu", "GET", "/apis/menus.example.com/v1", false},
		{"version listed", "coffee-menu", "GET", "/version", true},
		{"version subpath not listed", "coffee-menu", "GET", "/version/x", false},
		{"openapi prefix", "coffee-menu", "GET", "/openapi/v3/apis/menus.example.com/v1", true},
		{"non-resource POST", "coffee-menu", "POST", "/version", false},
		// An empty or missing list exposes nothing.
		{"empty scope list", "empty", "GET", menus, false},
		{"empty scope discovery", "empty", "GET", "/api", false},
		{"empty lists", "empty-list", "GET", "/version", false},
		// Unscoped only when the policy says so.
		{"unscoped", "kubectl", "DELETE", "/api/v1/namespaces/kube-system/secrets", true},
		{"unscoped exec", "kubectl", "POST", "/api/v1/namespaces/x/pods/p/exec", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc, ok := set.Client(tt.client)
			if !ok {
				t.Fatalf("client %s not registered", tt.client)
			}
			info, path := classify(t, tt.method, tt.target)
			if got := sc.Allows(info, path); got != tt.want {
				t.Fatalf("%s %s as %s: Allows = %v, want %v (classified %+v)", tt.method, tt.target, tt.client, got, tt.want, *info)
			}
		})
	}
}

// TestUnknownClientGetsNothing: a client the policy does not register has
// no scope, and a nil scope allows nothing, even a plain read.
func TestUnknownClientGetsNothing(t *testing.T) {
	set := mustSet(t, coffee)
	for _, name := range []string{"", "nobody", "Kubectl", "kubectl ", "console"} {
		if sc, ok := set.Client(name); ok || sc != nil {
			t.Errorf("Client(%q) = %v, %v; want none", name, sc, ok)
		}
	}
	var none *Scope
	info, path := classify(t, "GET", "/version")
	if none.Allows(info, path) {
		t.Fatal("a nil scope allowed a request")
	}
	if (&Scope{}).Allows(nil, "/version") {
		t.Fatal("a request that could not be classified was allowed")
	}
	var nilSet *Set
	if _, ok := nilSet.Client("kubectl"); ok {
		t.Fatal("a nil set registers a client")
	}
}

// TestOnlySubtracts: the matcher answers only yes or no about the scope;
// the proxy forwards an allowed request with the same groups to RBAC. So a
// scope listing something the user's RBAC refuses still meets RBAC — shown
// end to end in test/e2e/scope_test.go; here, that Allows has no other
// output than a boolean (no groups, no user): the type says it.
func TestOnlySubtracts(t *testing.T) {
	var f func(*Scope, *reqinfo.Info, string) bool = (*Scope).Allows
	_ = f
	sc := Unrestricted("x")
	info, path := classify(t, "GET", "/api/v1/namespaces/a/secrets")
	if !sc.Allows(info, path) || !sc.Unscoped() {
		t.Fatal("an unrestricted scope refused")
	}
}

// TestOneParser: the scope is matched on the canonical path kpath gives and
// the same Info the worker forwards under; a non-canonical spelling of a
// listed path never reaches the matcher, because kpath refuses it.
func TestOneParser(t *testing.T) {
	for _, raw := range []string{
		"/apis/menus.example.com/v1/namespaces/team-a/../team-c/coffeemenus",
		"/apis/menus.example.com/v1/namespaces/team-a//coffeemenus",
		"/apis/menus.example.com/v1/namespaces/team%2Da/coffeemenus",
		"/apis/menus.example.com/v1/namespaces/team-a%2Fcoffeemenus",
		"/version/.",
	} {
		if _, err := kpath.Parse(raw); err == nil {
			t.Errorf("kpath.Parse(%q) accepted a non-canonical path the scope would have to normalize", raw)
		}
	}
}

func TestParseErrorsNameTheKey(t *testing.T) {
	tests := []struct{ doc, want string }{
		{`[]`, "data.limen.config.clients must be an object"},
		{`{"Coffee": {}}`, "data.limen.config.clients.Coffee: client name"},
		{`{"a,b": {}}`, "data.limen.config.clients.a,b"},
		{`{"app": []}`, "data.limen.config.clients.app must be an object"},
		{`{"app": {"scopes": []}}`, `data.limen.config.clients.app has unknown key "scopes"`},
		{`{"app": {"unscoped": "yes"}}`, "data.limen.config.clients.app.unscoped must be true or false"},
		{`{"app": {"unscoped": true, "scope": [{"group": "", "version": "v1", "resource": "pods", "verbs": ["get"]}]}}`, "is unscoped and lists a scope"},
		{`{"app": {"scope": {}}}`, "data.limen.config.clients.app.scope must be a list"},
		{`{"app": {"scope": [{"version": "v1", "resource": "pods", "verbs": ["get"]}]}}`, `data.limen.config.clients.app.scope[0] needs "group"`},
		{`{"app": {"scope": [{"group": "", "resource": "pods", "verbs": ["get"]}]}}`, `scope[0] needs "version"`},
		{`{"app": {"scope": [{"group": "", "version": "v1", "verbs": ["get"]}]}}`, `scope[0] needs "resource"`},
		{`{"app": {"scope": [{"group": "", "version": "v1", "resource": "pods"}]}}`, `scope[0] needs "verbs"`},
		{`{"app": {"scope": [{"group": "", "version": "v1", "resource": "pods", "verbs": []}]}}`, "scope[0].verbs must not be empty"},
		{`{"app": {"scope": [{"group": "", "version": "v1", "resource": "pods", "verbs": ["lst"]}]}}`, `scope[0].verbs[0]: "lst" is not a verb`},
		{`{"app": {"scope": [{"group": "", "version": "v1", "resource": "pods", "verbs": ["proxy"]}]}}`, `scope[0].verbs[0]: "proxy"`},
		{`{"app": {"scope": [{"group": "", "version": "v1", "resource": "pods/exec", "verbs": ["get"]}]}}`, "scope[0].resource"},
		{`{"app": {"scope": [{"group": "", "version": "*", "resource": "pods", "verbs": ["get"]}]}}`, "scope[0].version"},
		{`{"app": {"scope": [{"group": "", "version": "", "resource": "pods", "verbs": ["get"]}]}}`, "scope[0].version must not be empty"},
		{`{"app": {"scope": [{"group": "", "version": "v1", "resource": "pods", "verbs": ["get"], "names": ["x"]}]}}`, `scope[0] has unknown key "names"`},
		{`{"app": {"scope": [{"group": "", "version": "v1", "resource": "pods", "verbs": ["get"], "namespaces": ["*", "a"]}]}}`, `scope[0].namespaces: "*"`},
		{`{"app": {"scope": [{"group": "", "version": "v1", "resource": "pods", "verbs": ["get"], "namespaces": [""]}]}}`, "scope[0].namespaces[0] must not be empty"},
		{`{"app": {"scope": [{"group": "", "version": "v1", "resource": "pods", "verbs": ["get"], "subresources": [1]}]}}`, "scope[0].subresources[0] must be a string"},
		{`{"app": {"scope": [{"group": "", "version": "v1", "resource": "pods", "verbs": ["get"], "subresources": ["*"]}]}}`, "scope[0].subresources[0]"},
		{`{"app": {"nonResourceURLs": ["version"]}}`, "nonResourceURLs[0]"},
		{`{"app": {"nonResourceURLs": ["/a/../b"]}}`, "nonResourceURLs[0]"},
		{`{"app": {"nonResourceURLs": ["/a*b"]}}`, "nonResourceURLs[0]"},
		{`{"app": {"userPrefix": "system:"}}`, "data.limen.config.clients.app.userPrefix"},
		{`{"app": {"userPrefix": "bot:"}}`, "data.limen.config.clients.app.userPrefix"},
	}
	for _, tt := range tests {
		_, err := ParseJSON([]byte(tt.doc))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseJSON(%s) = %v, want an error containing %q", tt.doc, err, tt.want)
		}
	}
}

func TestParseAbsentRegistersNothing(t *testing.T) {
	s, err := Parse(nil)
	if err != nil || len(s.Names()) != 0 {
		t.Fatalf("Parse(nil) = %v, %v; want an empty set", s.Names(), err)
	}
	sc, ok := mustSet(t, coffee).Client("coffee-menu")
	if !ok || sc.UserPrefix != "coffee:" || sc.Unscoped() {
		t.Fatalf("coffee-menu = %+v", sc)
	}
}

// The hot path: one scoped request, matched against docs/POLICY.md's list.
func BenchmarkAllows(b *testing.B) {
	set := mustSet(b, coffee)
	sc, _ := set.Client("coffee-menu")
	r := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/team-a/pods/web/log", nil)
	p, _ := kpath.Parse(r.URL.Path)
	info, _ := reqinfo.Classify(r, p)
	path := p.String()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if !sc.Allows(&info, path) {
			b.Fatal("refused")
		}
	}
}

func BenchmarkAllowsRefused(b *testing.B) {
	set := mustSet(b, coffee)
	sc, _ := set.Client("coffee-menu")
	r := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/team-a/secrets", nil)
	p, _ := kpath.Parse(r.URL.Path)
	info, _ := reqinfo.Classify(r, p)
	path := p.String()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if sc.Allows(&info, path) {
			b.Fatal("allowed")
		}
	}
}

// streams is a scope document for the verbs of exec, attach and
// port-forward: one client per verb list a scope or an RBAC author might
// write for the three subresources, each also allowed to get the pod.
const streams = `{
  "get-only":    {"scope": [{"group": "", "version": "v1", "resource": "pods", "subresources": ["exec", "attach", "portforward"], "namespaces": ["a"], "verbs": ["get"]}]},
  "create-only": {"scope": [{"group": "", "version": "v1", "resource": "pods", "subresources": ["exec", "attach", "portforward"], "namespaces": ["a"], "verbs": ["create"]}]},
  "both":        {"scope": [{"group": "", "version": "v1", "resource": "pods", "subresources": ["exec", "attach", "portforward"], "namespaces": ["a"], "verbs": ["get", "create"]}]},
  "split": {"scope": [
    {"group": "", "version": "v1", "resource": "pods", "subresources": ["exec", "attach", "portforward"], "namespaces": ["a"], "verbs": ["get"]},
    {"group": "", "version": "v1", "resource": "pods", "subresources": ["exec", "attach", "portforward"], "namespaces": ["a"], "verbs": ["create"]}]},
  "split-namespaces": {"scope": [
    {"group": "", "version": "v1", "resource": "pods", "subresources": ["exec", "attach", "portforward"], "namespaces": ["a"], "verbs": ["get"]},
    {"group": "", "version": "v1", "resource": "pods", "subresources": ["exec", "attach", "portforward"], "namespaces": ["b"], "verbs": ["create"]}]},
  "exec-only": {"scope": [{"group": "", "version": "v1", "resource": "pods", "subresources": ["exec"], "namespaces": ["a"], "verbs": ["get", "create"]}]},
  "star":      {"scope": [{"group": "", "version": "v1", "resource": "pods", "subresources": ["exec", "attach", "portforward"], "namespaces": ["a"], "verbs": ["*"]}]}
}`

// TestStreamsTakeTheAPIServersVerbs: exec, attach and port-forward are
// decided with the verbs kube-apiserver authorizes for them. Over SPDY
// they are a POST, classified create, and RBAC checks create. Over
// WebSocket (kubectl 1.30 and later for exec and attach, 1.31 for
// port-forward) they are a GET, classified get; the API server checks get
// and then, in the subresource's handler, create as well. test/e2e's
// TestScopeStreamVerbs shows the API server answering so for the same
// verb lists; this is the matcher's half.
func TestStreamsTakeTheAPIServersVerbs(t *testing.T) {
	set := mustSet(t, streams)
	// want: allowed over SPDY (POST), allowed over WebSocket (GET).
	for _, c := range []struct {
		client   string
		spdy, ws bool
	}{
		{client: "get-only", spdy: false, ws: false},
		{client: "create-only", spdy: true, ws: false},
		{client: "both", spdy: true, ws: true},
		{client: "split", spdy: true, ws: true},
		{client: "split-namespaces", spdy: false, ws: false},
		{client: "star", spdy: true, ws: true},
	} {
		sc, ok := set.Client(c.client)
		if !ok {
			t.Fatalf("client %s not registered", c.client)
		}
		for _, sub := range []string{"exec?command=sh&stdout=true", "attach?stdout=true", "portforward?ports=80"} {
			for method, want := range map[string]bool{http.MethodPost: c.spdy, http.MethodGet: c.ws} {
				info, path := classify(t, method, "/api/v1/namespaces/a/pods/web/"+sub)
				if got := sc.Allows(info, path); got != want {
					t.Errorf("%s %s as %s (classified %s): Allows = %v, want %v", method, sub, c.client, info.Verb, got, want)
				}
			}
		}
	}
	// create for one subresource is not create for another.
	sc, _ := set.Client("exec-only")
	for _, target := range []string{"/api/v1/namespaces/a/pods/web/attach", "/api/v1/namespaces/a/pods/web/portforward"} {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			if info, path := classify(t, method, target); sc.Allows(info, path) {
				t.Errorf("%s %s through exec-only: allowed", method, target)
			}
		}
	}
	// Other GETs of pods keep their one verb.
	sc, _ = set.Client("get-only")
	for _, target := range []string{"/api/v1/namespaces/a/pods/web"} {
		if info, path := classify(t, http.MethodGet, target); !sc.Allows(info, path) {
			t.Errorf("GET %s through get-only: refused", target)
		}
	}
	sc, _ = mustSet(t, coffee).Client("coffee-menu")
	if info, path := classify(t, http.MethodGet, "/api/v1/namespaces/team-a/pods/web/log?follow=true"); !sc.Allows(info, path) {
		t.Error("logs (get pods/log) now need create too")
	}
}

// TestStreamRefusalNamesBothVerbs: refusing a WebSocket exec says which
// verbs the scope would have to list.
func TestStreamRefusalNamesBothVerbs(t *testing.T) {
	info, path := classify(t, http.MethodGet, "/api/v1/namespaces/a/pods/web/exec?command=sh")
	if msg := Refusal("app", info, path); !strings.HasPrefix(msg, "get and create pods/exec (v1) in namespace a is "+Phrase) {
		t.Fatalf("Refusal = %q", msg)
	}
	info, path = classify(t, http.MethodPost, "/api/v1/namespaces/a/pods/web/exec?command=sh")
	if msg := Refusal("app", info, path); !strings.HasPrefix(msg, "create pods/exec (v1) in namespace a is "+Phrase) {
		t.Fatalf("Refusal = %q", msg)
	}
}
