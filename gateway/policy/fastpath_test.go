package policy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"

	"github.com/limenhq/limen/gateway/identity"
)

// embeddedCompiler is the embedded policy compiled once, for evaluating
// kube.groups against data that activation would refuse.
var embeddedCompiler = sync.OnceValues(func() (*ast.Compiler, error) {
	c, err := embeddedContent()
	if err != nil {
		return nil, err
	}
	comp := ast.NewCompiler().WithStrict(false)
	comp.Compile(c.modules)
	if comp.Failed() {
		return nil, comp.Errors
	}
	return comp, nil
})

// regoGroups returns the full Rego decision for data: data.limen.kube.groups
// of the embedded policy, filtered as the engine filters it, with no data
// validation or probe in the way, so hostile data reaches the rules.
func regoGroups(t testing.TB, data map[string]any) func(identity.Principal, Cluster, []string) []string {
	t.Helper()
	comp, err := embeddedCompiler()
	if err != nil {
		t.Fatal(err)
	}
	store := inmem.NewFromObjectWithOpts(data, inmem.OptRoundTripOnWrite(false), inmem.OptReturnASTValuesOnRead(true))
	pq, err := rego.New(rego.Query(queryGroups), rego.Compiler(comp), rego.Store(store)).PrepareForEval(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s := &snapshot{groups: pq}
	return func(p identity.Principal, c Cluster, requested []string) []string {
		good, _, err := s.evalGroups(context.Background(), groupsInput(p, c, requested))
		if err != nil {
			t.Fatalf("Rego groups for %s on %s: %v", p, c.Name, err)
		}
		return good
	}
}

// hostileData binds through every path kube.groups reads, with the shapes
// data validation refuses but the rules still read (system: and malformed
// groups, unknown roles, empty selectors, a client registered as false or
// null) and the ones it accepts.
func hostileData() map[string]any {
	long := strings.Repeat("g", 253)
	roles := map[string]any{
		"view":      map[string]any{"groups": []any{"limen:view", "limen:view"}, "clusters": []any{map[string]any{"name": "*"}}},
		"edit":      map[string]any{"groups": []any{"limen:edit"}, "clusters": []any{map[string]any{"labels": map[string]any{"env": "dev"}}, map[string]any{"name": "prod", "labels": map[string]any{"tier": ""}}}},
		"sys":       map[string]any{"groups": []any{"system:masters", "SYSTEM:nodes", "System:x", "systemx", "system", "ok-group"}, "clusters": []any{map[string]any{"name": "*"}}},
		"bad":       map[string]any{"groups": []any{"", "-lead", "has space", "é", long, long + "g", "a:b.c_d@e-f", "x\n"}, "clusters": []any{map[string]any{}}},
		"app":       map[string]any{"groups": []any{"app:read"}, "clusters": []any{map[string]any{"name": "demo"}}, "clients": []any{"app"}},
		"any":       map[string]any{"groups": []any{"any:read"}, "clusters": []any{map[string]any{"name": "*"}}, "clients": []any{"*"}},
		"none":      map[string]any{"groups": []any{"none:read"}, "clusters": []any{map[string]any{"name": "*"}}, "clients": []any{}},
		"empty":     map[string]any{"clusters": []any{map[string]any{"name": "*"}}},
		"nowhere":   map[string]any{"groups": []any{"nowhere:read"}},
		"noname":    map[string]any{"groups": []any{"noname:read"}, "clusters": []any{map[string]any{"name": ""}}},
		"jit":       map[string]any{"groups": []any{"jit:edit", "system:jit"}, "clusters": []any{map[string]any{"name": "demo"}, map[string]any{"labels": map[string]any{"env": "prod", "team": "a"}}}},
		"jit-app":   map[string]any{"groups": []any{"jitapp:edit"}, "clusters": []any{map[string]any{"name": "*"}}, "clients": []any{"app", "kubectl"}},
		"by-trait":  map[string]any{"groups": []any{"trait:read"}, "clusters": []any{map[string]any{"name": "*"}}},
		"oidc-only": map[string]any{"groups": []any{"oidc:read"}, "clusters": []any{map[string]any{"name": "*"}}, "clients": []any{"*"}},
	}
	return map[string]any{"limen": map[string]any{"config": map[string]any{
		"roles": roles,
		"bindings": map[string]any{
			"users": map[string]any{
				"alice": []any{"view", "edit", "app", "any", "none", "empty", "nowhere", "noname"},
				"bob":   []any{"view", "unknown-role"},
				"sys":   []any{"sys", "bad"},
				"ci":    []any{"edit"}, // a user named like the bot
			},
			"bots": map[string]any{"ci": []any{"view", "jit-app"}},
			"traits": map[string]any{
				"groups": map[string]any{"dev": []any{"by-trait"}, "system:masters": []any{"sys"}, "approver": []any{"any"}},
				"kind":   map[string]any{"user": []any{"edit"}},
			},
			"issuers": map[string]any{
				"oidc": map[string]any{
					"users":  map[string]any{"bob": []any{"oidc-only"}},
					"traits": map[string]any{"groups": map[string]any{"dev": []any{"oidc-only", "edit"}}},
				},
				"empty": map[string]any{},
			},
		},
		"requests": map[string]any{
			"jit":       map[string]any{"requesters": map[string]any{"roles": []any{"view", "unknown-role"}}},
			"jit-app":   map[string]any{"requesters": map[string]any{"traits": map[string]any{"groups": []any{"dev", "approver"}}}},
			"sys":       map[string]any{"requesters": map[string]any{}},
			"edit":      map[string]any{"approvers": map[string]any{"roles": []any{"view"}}},
			"unknown":   map[string]any{"requesters": map[string]any{"roles": []any{"view"}}},
			"oidc-only": map[string]any{"requesters": map[string]any{"roles": []any{"oidc-only"}, "traits": map[string]any{"groups": []any{"dev"}}}},
		},
		"clients": map[string]any{"kubectl": map[string]any{"unscoped": true}, "app": map[string]any{}, "off": false, "nul": nil},
	}}}
}

// differentialCases are the principals, clusters and requested roles every
// data set is decided for, by both paths.
func differentialCases() ([]identity.Principal, []Cluster, [][]string) {
	many := map[string][]string{}
	for i := range 20 {
		many[fmt.Sprintf("t%d", i)] = []string{"a", "b", "dev"}
	}
	many["groups"] = make([]string, 0, 64)
	for i := range 60 {
		many["groups"] = append(many["groups"], fmt.Sprintf("v%d", i))
	}
	many["groups"] = append(many["groups"], "dev", "approver")
	u := identity.KindUser
	ps := []identity.Principal{
		{Kind: u, Name: "nobody"},
		{Kind: u, Name: "alice"},
		{Kind: u, Name: "alice", Traits: map[string][]string{"groups": {"dev"}}},
		{Kind: u, Name: "bob"},
		{Kind: u, Name: "bob", Issuer: "oidc"},
		{Kind: u, Name: "bob", Issuer: "corp"},
		{Kind: u, Name: "bob", Issuer: "empty", Traits: map[string][]string{"groups": {"dev"}}},
		{Kind: u, Name: "carol", Issuer: "oidc", Traits: map[string][]string{"groups": {"dev", "approver"}}},
		{Kind: u, Name: "sys"},
		{Kind: u, Name: "nobody", Traits: map[string][]string{"groups": {"system:masters"}}},
		{Kind: u, Name: "nobody", Traits: map[string][]string{"groups": {}}},
		{Kind: u, Name: "nobody", Traits: map[string][]string{"kind": {"user"}}},
		{Kind: u, Name: "nobody", Traits: many},
		{Kind: u, Name: "ci"},
		{Kind: identity.KindBot, Name: "ci"},
		{Kind: identity.KindBot, Name: "alice"},
		{Kind: identity.KindBot, Name: "nobody", Traits: map[string][]string{"groups": {"dev", "approver"}}},
		{Kind: identity.KindBot, Name: "ci", Issuer: "oidc", Traits: map[string][]string{"groups": {"dev"}}},
		{Kind: u, Name: "dana", Traits: map[string][]string{"groups": {"admins"}}},
		benchPrincipal,
		{Kind: u, Name: "user-77", Traits: map[string][]string{"groups": {"idp-group-3", "idp-group-499"}}},
	}
	cs := []Cluster{
		{Name: "demo", Labels: map[string]string{"env": "dev"}},
		{Name: "demo"},
		{Name: "prod", Labels: map[string]string{"env": "prod"}},
		{Name: "prod", Labels: map[string]string{"env": "prod", "tier": ""}},
		{Name: "prod", Labels: map[string]string{"tier": "x"}},
		{Name: "staging", Labels: map[string]string{"env": "prod", "team": "a", "region": "eu"}},
		{Name: "staging", Labels: map[string]string{"env": "prod", "team": "b"}},
		{Name: "*", Labels: map[string]string{}},
		{Name: "dev-2", Labels: map[string]string{"env": "dev"}},
		benchCluster,
		{Name: "cluster-1", Labels: map[string]string{"env": "prod", "team": "t1"}},
	}
	reqs := [][]string{nil, {"jit"}, {"jit-app", "jit-app"}, {"sys", "edit", "unknown", "nope"}, {"oidc-only", "jit"}, {"edit-demo"}}
	return ps, cs, reqs
}

// TestFastPathMatchesRego decides every differential case, through every
// client, with both the index and the full Rego evaluation, on the
// example data and on hostile data.
func TestFastPathMatchesRego(t *testing.T) {
	example, err := embeddedContent()
	if err != nil {
		t.Fatal(err)
	}
	ps, cs, reqs := differentialCases()
	clients := []string{"kubectl", "app", "console", "off", "nul", "log-viewer", ""}
	for name, data := range map[string]map[string]any{"example": example.data, "hostile": hostileData(), "large": largeData(), "empty": {}} {
		t.Run(name, func(t *testing.T) {
			fast, err := buildFastPath(data)
			if err != nil {
				t.Fatalf("the index refuses the %s data: %v", name, err)
			}
			full := regoGroups(t, data)
			n, granted := 0, 0
			for _, client := range clients {
				for _, p := range ps {
					p.ClientID = client
					for _, c := range cs {
						for _, r := range reqs {
							want, got := full(p, c, r), fast.groups(p, c, r)
							if !slices.Equal(got, want) {
								t.Errorf("%s (client %q, traits %v) on %s %v, requested %v: fast path %q, Rego %q", p, client, p.Traits, c.Name, c.Labels, r, got, want)
							}
							n++
							if len(want) > 0 {
								granted++
							}
						}
					}
				}
			}
			t.Logf("%d decisions compared, %d granting", n, granted)
			if granted == 0 && name != "empty" {
				t.Fatal("no decision grants anything: the comparison proves nothing")
			}
		})
	}
}

// TestFastPathRefusesShapes: data the rules read otherwise than a lookup
// leaves the fast path off rather than answering differently.
func TestFastPathRefusesShapes(t *testing.T) {
	cfg := func(k string, v any) map[string]any {
		return map[string]any{"limen": map[string]any{"config": map[string]any{k: v}}}
	}
	for _, tc := range []struct {
		name string
		data map[string]any
		want string
	}{
		{"config not an object", map[string]any{"limen": map[string]any{"config": []any{}}}, "data.limen.config is not an object"},
		{"rules beside data", map[string]any{"limen": map[string]any{"kube": map[string]any{}}}, "data.limen.kube is a document"},
		{"users a string", cfg("bindings", map[string]any{"users": "alice"}), "bindings.users is not an object"},
		{"binding an object", cfg("bindings", map[string]any{"users": map[string]any{"a": map[string]any{"x": "view"}}}), "bindings.users.a is not a list"},
		{"binding a number", cfg("bindings", map[string]any{"traits": map[string]any{"g": map[string]any{"v": []any{1.0}}}}), "bindings.traits.g.v[0] is not a string"},
		{"role clients null", cfg("roles", map[string]any{"r": map[string]any{"clients": nil}}), "roles.r.clients is not a list"},
		{"group a number", cfg("roles", map[string]any{"r": map[string]any{"groups": []any{"a", 2.0}}}), "roles.r.groups[1] is not a string"},
		{"selector labels null", cfg("roles", map[string]any{"r": map[string]any{"clusters": []any{map[string]any{"labels": nil}}}}), "labels is null"},
		{"selector label a number", cfg("roles", map[string]any{"r": map[string]any{"clusters": []any{map[string]any{"labels": map[string]any{"n": 1.0}}}}}), "labels.n is not a string"},
		{"selector name a number", cfg("roles", map[string]any{"r": map[string]any{"clusters": []any{map[string]any{"name": 1.0}}}}), "name is not a string"},
		{"requesters a list", cfg("requests", map[string]any{"r": map[string]any{"requesters": []any{}}}), "requesters is not an object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := buildFastPath(tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("buildFastPath = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestFastPathOnForEmbeddedPolicy: the default bundle and a service bundle
// of Limen's own policy are answered by the index. If this fails after a
// change to policies/kube.rego, roles.rego or requests.rego, see
// fastPolicyDigest.
func TestFastPathOnForEmbeddedPolicy(t *testing.T) {
	e := mustEmbedded(t, Options{})
	if st := e.Status(); st.FastPathOff != "" || e.active.Load().fast == nil {
		t.Fatalf("the fast path is off for the embedded policy: %s\n(after a policy change: make fastpath.go mirror it, pass TestFastPathMatchesRego and the fuzz target, then update fastPolicyDigest in fastindex.go)", st.FastPathOff)
	}
	priv, pub := testKeys(t)
	raw := buildBundle(t, "1", defaultRego(t), bobData("limen:view"), priv)
	e2, err := New(context.Background(), Options{Bundle: raw, PublicKeyPEM: pub, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if st := e2.Status(); st.FastPathOff != "" {
		t.Fatalf("the fast path is off for a bundle of Limen's own policy: %s", st.FastPathOff)
	}
}

// TestFastPathOffForOtherPolicy: a bundle whose policy is not Limen's own is
// decided in Rego (its own answer, not the index's), and Status says why.
func TestFastPathOffForOtherPolicy(t *testing.T) {
	priv, pub := testKeys(t)
	extra := `package limen.kube

groups contains "extra:group" if input.principal.name == "bob"
`
	for _, tc := range []struct {
		name   string
		change func(map[string]string)
		data   map[string]any
		off    string
		who    identity.Principal
		want   []string
	}{
		{"kube.rego edited", func(m map[string]string) {
			m["kube.rego"] = strings.Replace(m["kube.rego"], "some g in r.groups", "some g in array.concat(r.groups, [\"extra:group\"])", 1)
		}, bobData("limen:view"), "module /kube.rego (package data.limen.kube) is not Limen's own", bob, []string{"extra:group", "limen:view"}},
		{"a second groups module", func(m map[string]string) { m["extra.rego"] = extra }, bobData("limen:view"),
			"(package data.limen.kube)", bob, []string{"extra:group", "limen:view"}},
		{"a binding written as a rule", func(m map[string]string) {
			m["extra.rego"] = "package limen.config.bindings.users\n\ncarol := [\"r\"]\n"
		}, bobData("limen:view"), "defines data.limen.config.bindings.users.carol", identity.Principal{ClientID: "kubectl", Kind: identity.KindUser, Name: "carol"}, []string{"limen:view"}},
		{"a rule naming a mirrored document", func(m map[string]string) {
			m["extra.rego"] = "package limen\n\nroles.extra := 1\n"
		}, bobData("limen:view"), "defines data.limen.roles.extra", bob, []string{"limen:view"}},
		{"data validation lets through", func(map[string]string) {}, func() map[string]any {
			d := bobData("limen:view")
			d["limen"].(map[string]any)["config"].(map[string]any)["bindings"].(map[string]any)["bots"] = "ci"
			return d
		}(), "bindings.bots is not an object", bob, []string{"limen:view"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rego := defaultRego(t)
			tc.change(rego)
			e, err := New(context.Background(), Options{Bundle: buildBundle(t, "1", rego, tc.data, priv), PublicKeyPEM: pub, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			if off := e.Status().FastPathOff; !strings.Contains(off, tc.off) {
				t.Fatalf("FastPathOff = %q, want it to say %q", off, tc.off)
			}
			d, err := e.Groups(context.Background(), tc.who, demo)
			if err != nil || !slices.Equal(d.Groups, tc.want) {
				t.Fatalf("Groups(%s, demo) = %v, %v; want %v (the bundle's own Rego)", tc.who, d.Groups, err, tc.want)
			}
		})
	}
	// Another package beside Limen's own leaves the fast path on.
	rego := defaultRego(t)
	rego["custom.rego"] = "package acme.extra\n\nx := 1\n"
	e, err := New(context.Background(), Options{Bundle: buildBundle(t, "1", rego, bobData("limen:view"), priv), PublicKeyPEM: pub, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if off := e.Status().FastPathOff; off != "" {
		t.Fatalf("a module in another package turned the fast path off: %s", off)
	}
}

// TestProbeTurnsWrongIndexOff: activation compares the index with Rego on
// every probed decision; an index that answers otherwise (here: one that
// lost a group) is dropped for the snapshot, which then decides in Rego.
func TestProbeTurnsWrongIndexOff(t *testing.T) {
	c, err := embeddedContent()
	if err != nil {
		t.Fatal(err)
	}
	s, err := compile(context.Background(), c, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s.fast == nil {
		t.Fatalf("fast path off for the embedded policy: %s", s.fastOff)
	}
	s.fast.roles["view-demo"].groups = nil // bob's only role
	if err := probe(context.Background(), s, c.data); err != nil {
		t.Fatal(err)
	}
	if s.fast != nil || !strings.Contains(s.fastOff, "where Rego answers") {
		t.Fatalf("the probe kept an index that drops bob's group (fastOff %q)", s.fastOff)
	}
}

// TestGroupsFastPathEngine: Engine.Groups answers from the index, with the
// decision the same engine gives without it, cache hit or miss.
func TestGroupsFastPathEngine(t *testing.T) {
	ctx := context.Background()
	e := mustEmbedded(t, Options{})
	slow := mustEmbedded(t, Options{CacheEntries: -1})
	s := *slow.active.Load()
	s.fast = nil
	slow.active.Store(&s)
	ps, cs, _ := differentialCases()
	for _, p := range append(ps, alice, bob, dana, ci) {
		p.ClientID = "kubectl"
		for _, c := range cs {
			for range 2 { // a miss, then a hit
				d, err := e.Groups(ctx, p, c)
				want, werr := slow.Groups(ctx, p, c)
				if fmt.Sprint(err) != fmt.Sprint(werr) || !slices.Equal(d.Groups, want.Groups) || d.Revision != want.Revision {
					t.Fatalf("Groups(%s, %s) = %v %s, %v; Rego: %v %s, %v", p, c.Name, d.Groups, d.Revision, err, want.Groups, want.Revision, werr)
				}
			}
		}
	}
}

// fuzzBytes hands out the fuzzer's bytes as choices; zeros once spent, and
// zeros choose what grants (a role that exists, a binding that binds), so
// that short inputs already reach the groups.
type fuzzBytes []byte

func (b *fuzzBytes) next() byte {
	if len(*b) == 0 {
		return 0
	}
	c := (*b)[0]
	*b = (*b)[1:]
	return c
}

// rarely holds for one byte in four (never for zero).
func (b *fuzzBytes) rarely() bool { return b.next()%4 == 3 }

// pick returns one of xs.
func pick[T any](b *fuzzBytes, xs ...T) T { return xs[int(b.next())%len(xs)] }

// some returns from min to max of xs (repeats allowed).
func some[T any](b *fuzzBytes, min, max int, xs ...T) []T {
	n := min + int(b.next())%(max-min+1)
	out := make([]T, n)
	for i := range out {
		out[i] = pick(b, xs...)
	}
	return out
}

// Vocabulary shared by the generated data and the generated principals, so
// that they meet; raw is the fuzzer's own string, to reach past it.
var (
	fzRoles    = []string{"r0", "r1", "r2", "r3", "r4", "ghost"}
	fzGroups   = []string{"g:view", "g:edit", "g:admin", "ok.1@a_b-c", "system:masters", "SYSTEM:x", "bad group", "-x", ""}
	fzClients  = []string{"kubectl", "app", "*", "console"}
	fzNames    = []string{"alice", "bob", "ci"}
	fzTraits   = []string{"groups", "team"}
	fzValues   = []string{"dev", "ops", "system:masters"}
	fzClusters = []string{"demo", "prod", "*"}
	fzLabels   = [][2]string{{"env", "dev"}, {"env", "prod"}, {"team", "a"}, {"tier", ""}}
	fzIssuers  = []string{"", "oidc", "", "corp"}
)

func anyStrings(xs []string) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// fuzzData builds a data.limen.config from b: roles with groups, clients
// and selectors, bindings of every source, and requests.
func fuzzData(b *fuzzBytes) map[string]any {
	roles := map[string]any{}
	for _, name := range fzRoles[:5] {
		if b.rarely() {
			continue
		}
		r := map[string]any{}
		if !b.rarely() {
			r["groups"] = anyStrings(some(b, 1, 3, fzGroups...))
		}
		if b.rarely() {
			r["clients"] = anyStrings(some(b, 0, 2, fzClients...))
		}
		if !b.rarely() {
			var sels []any
			for range some(b, 1, 2, 0) {
				sel := map[string]any{}
				if b.next()%2 == 1 {
					sel["name"] = pick(b, fzClusters...)
				}
				if b.next()%2 == 1 {
					labels := map[string]any{}
					for _, l := range some(b, 0, 2, fzLabels...) {
						labels[l[0]] = l[1]
					}
					sel["labels"] = labels
				}
				sels = append(sels, sel)
			}
			r["clusters"] = sels
		}
		roles[name] = r
	}
	named := func() map[string]any {
		m := map[string]any{}
		for _, n := range fzNames {
			if !b.rarely() {
				m[n] = anyStrings(some(b, 1, 3, fzRoles...))
			}
		}
		return m
	}
	traits := func() map[string]any {
		m := map[string]any{}
		for _, t := range some(b, 1, 2, fzTraits...) {
			vs := map[string]any{}
			for _, v := range some(b, 1, 2, fzValues...) {
				vs[v] = anyStrings(some(b, 1, 2, fzRoles...))
			}
			m[t] = vs
		}
		return m
	}
	bindings := map[string]any{"users": named(), "bots": named(), "traits": traits()}
	if !b.rarely() {
		bindings["issuers"] = map[string]any{"oidc": map[string]any{"users": named(), "traits": traits()}}
	}
	requests := map[string]any{}
	for _, name := range some(b, 1, 3, fzRoles...) {
		rule := map[string]any{}
		if !b.rarely() {
			who := map[string]any{}
			if b.next()%2 == 0 {
				who["roles"] = anyStrings(some(b, 1, 2, fzRoles...))
			}
			if b.next()%2 == 1 {
				who["traits"] = map[string]any{pick(b, fzTraits...): anyStrings(some(b, 1, 2, fzValues...))}
			}
			rule["requesters"] = who
		}
		requests[name] = rule
	}
	clients := map[string]any{"kubectl": map[string]any{}}
	if b.next()%2 == 0 {
		clients["app"] = pick[any](b, map[string]any{}, false, nil)
	}
	return map[string]any{"limen": map[string]any{"config": map[string]any{
		"roles": roles, "bindings": bindings, "requests": requests, "clients": clients,
	}}}
}

// fuzzInput builds a principal, a cluster and requested roles from b; raw
// replaces one name when set.
func fuzzInput(b *fuzzBytes, raw string) (identity.Principal, Cluster, []string) {
	p := identity.Principal{
		ClientID: pick(b, "kubectl", "app", "kubectl", "console", "kubectl", ""),
		Kind:     pick(b, identity.KindUser, identity.KindBot, identity.KindUser),
		Name:     pick(b, append(fzNames, "nobody")...),
		Issuer:   pick(b, fzIssuers...),
	}
	if p.Kind == identity.KindBot && !b.rarely() {
		p.Issuer = "" // valid input mostly
	}
	if n := b.next() % 3; n > 0 {
		p.Traits = map[string][]string{}
		for range n {
			p.Traits[pick(b, fzTraits...)] = some(b, 0, 3, fzValues...)
		}
	}
	c := Cluster{Name: pick(b, fzClusters...), Labels: map[string]string{}}
	for _, l := range some(b, 0, 3, fzLabels...) {
		c.Labels[l[0]] = l[1]
	}
	requested := some(b, 0, 3, fzRoles...)
	if raw != "" {
		switch b.next() % 4 {
		case 0:
			p.Name = raw
		case 1:
			c.Name = raw
		case 2:
			p.Traits = map[string][]string{pick(b, fzTraits...): {raw}}
		case 3:
			requested = append(requested, raw)
		}
	}
	return p, c, requested
}

// FuzzFastPathMatchesRego generates policy data and decisions and compares
// the index's answer with the full Rego evaluation of the embedded policy.
// Input the engine refuses (checkInput) never reaches either.
func FuzzFastPathMatchesRego(f *testing.F) {
	f.Add([]byte{}, []byte{}, "")
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, []byte{0, 0, 1, 0, 1, 0, 2, 1, 1, 1}, "")
	f.Add([]byte("roles, bindings and requests from these bytes, and more of them"), []byte("a principal"), "dev")
	f.Add([]byte{255, 254, 253, 252, 251, 250, 249, 248, 247, 246, 245, 244, 243, 242, 241, 240}, []byte{3, 1, 2, 2, 0, 1, 1, 1, 2, 2, 2, 3, 0, 1, 2}, "r0")
	f.Fuzz(func(t *testing.T, dataBytes, inputBytes []byte, raw string) {
		fuzzCompare(t, dataBytes, inputBytes, raw)
	})
}

// fuzzCompare decides eight generated inputs on generated data both ways
// and returns how many decisions granted a group.
func fuzzCompare(t *testing.T, dataBytes, inputBytes []byte, raw string) (granted int) {
	db := fuzzBytes(dataBytes)
	data := fuzzData(&db)
	fast, err := buildFastPath(data)
	if err != nil {
		t.Fatalf("the index refuses generated data: %v", err)
	}
	full := regoGroups(t, data)
	ib := fuzzBytes(inputBytes)
	for range 8 {
		p, c, requested := fuzzInput(&ib, raw)
		if checkInput(p, c) != nil {
			continue
		}
		got, want := fast.groups(p, c, requested), full(p, c, requested)
		if !slices.Equal(got, want) {
			t.Fatalf("%s (client %q, traits %v) on %s %v, requested %v, data %v: fast path %q, Rego %q",
				p, p.ClientID, p.Traits, c.Name, c.Labels, requested, data, got, want)
		}
		if len(want) > 0 {
			granted++
		}
	}
	return granted
}

// TestFastPathMatchesRegoRandom runs the fuzz target's comparison on 400
// pseudo-random inputs (a fixed seed), so that plain go test covers the
// generator too, and checks that enough of them grant to prove anything.
func TestFastPathMatchesRegoRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 10))
	granted := 0
	for range 400 {
		d, in := make([]byte, 160), make([]byte, 96)
		for i := range d {
			d[i] = byte(r.Uint32())
		}
		for i := range in {
			in[i] = byte(r.Uint32())
		}
		granted += fuzzCompare(t, d, in, "")
	}
	t.Logf("%d of 3,200 decisions granted", granted)
	if granted < 100 {
		t.Fatalf("only %d generated decisions grant a group: the generator proves too little", granted)
	}
}
