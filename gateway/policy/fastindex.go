package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/limenhq/limen/policies"
)

// fastPolicyFiles are the modules kube.groups depends on: the fast path
// mirrors them, and only them.
var fastPolicyFiles = []string{"kube.rego", "roles.rego", "requests.rego"}

// fastPolicyDigest is the SHA-256 of fastPolicyFiles (name, then source,
// in that order) that fastpath.go was written against. When the policy
// changes, the fast path turns itself off (every decision is evaluated in
// Rego, correct but slow) and TestFastPathOnForEmbeddedPolicy fails: check
// that fastpath.go still mirrors the rules, make the differential tests
// pass, then update this digest.
const fastPolicyDigest = "3b0fa12f4990a5c4ae6ebe8dc0b05be0775b0d67ddd9708397b6eb3d16aa2b94"

// fastReads are the documents the mirrored rules read or define; no other
// module may define any of them, nor any document inside them.
var fastReads = [][]string{
	{"limen", "kube"}, {"limen", "roles"}, {"limen", "requests"}, {"limen", "config"},
}

// embeddedFast is the embedded policy's modules for fastPolicyFiles, by
// package, and their digest.
var embeddedFast = sync.OnceValues(func() (map[string]*ast.Module, error) {
	h := sha256.New()
	out := map[string]*ast.Module{}
	for _, name := range fastPolicyFiles {
		src, err := fs.ReadFile(policies.FS(), name)
		if err != nil {
			return nil, err
		}
		h.Write([]byte(name))
		h.Write(src)
		m, err := ast.ParseModuleWithOpts(path.Join("policies", name), string(src), ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			return nil, err
		}
		out[m.Package.Path.String()] = m
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != fastPolicyDigest {
		return nil, fmt.Errorf("the embedded %s (digest %s) are not the rules the fast path mirrors (digest %s)",
			strings.Join(fastPolicyFiles, ", "), got, fastPolicyDigest)
	}
	return out, nil
})

// newFastPath returns the fast path for c, or nil and the reason it cannot
// answer for c: decisions are then evaluated in Rego.
func newFastPath(c content) (*fastPath, string) {
	if err := understandFastPath(c.modules); err != nil {
		return nil, err.Error()
	}
	f, err := buildFastPath(c.data)
	if err != nil {
		return nil, err.Error()
	}
	return f, ""
}

// understandFastPath checks that the modules decide kube.groups exactly as
// the embedded policy does: each mirrored package is one module equal to
// the embedded one, and no other module defines a document those rules
// read (a rule in data.limen.config would shadow the data the index is
// built from).
func understandFastPath(modules map[string]*ast.Module) error {
	want, err := embeddedFast()
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, file := range slices.Sorted(maps.Keys(modules)) {
		m := modules[file]
		pkg := m.Package.Path.String()
		if w, ok := want[pkg]; ok {
			if seen[pkg] {
				return fmt.Errorf("package %s is split over more than one module (%s is one)", pkg, file)
			}
			seen[pkg] = true
			if !m.Equal(w) {
				return fmt.Errorf("module %s (package %s) is not Limen's own", file, pkg)
			}
			continue
		}
		for _, r := range m.Rules {
			if p := docPath(r); overlapsFastReads(p) {
				return fmt.Errorf("module %s defines data.%s, which kube.groups reads", file, strings.Join(p, "."))
			}
		}
	}
	for pkg := range want {
		if !seen[pkg] {
			return fmt.Errorf("the bundle has no module for package %s", pkg)
		}
	}
	return nil
}

// docPath is the constant part of the document r defines, below data.
func docPath(r *ast.Rule) []string {
	ref := r.Ref().StringPrefix()
	out := make([]string, 0, len(ref))
	for _, t := range ref[1:] {
		s, _ := t.Value.(ast.String)
		out = append(out, string(s))
	}
	return out
}

// overlapsFastReads reports whether the document at p contains or is
// contained in one of fastReads.
func overlapsFastReads(p []string) bool {
	for _, r := range fastReads {
		n := min(len(p), len(r))
		if slices.Equal(p[:n], r[:n]) {
			return true
		}
	}
	return false
}

// buildFastPath indexes data.limen.config. It refuses any shape the
// mirrored rules would read differently from a Go lookup (a binding that
// is not a list of strings, a selector label that is not a string, ...):
// data validation refuses most of them already, and the rest are answered
// by Rego.
func buildFastPath(data map[string]any) (*fastPath, error) {
	f := &fastPath{clients: map[string]struct{}{}, roles: map[string]*fastRole{}, requests: map[string]*fastRequest{}, issuers: map[string]*fastBindings{}}
	limen, err := object(data["limen"], "data.limen")
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"kube", "roles", "requests"} {
		if _, ok := limen[k]; ok {
			return nil, fmt.Errorf("data.limen.%s is a document in the bundle's data, beside the rules of that name", k)
		}
	}
	config, err := object(limen["config"], "data.limen.config")
	if err != nil {
		return nil, err
	}
	clients, err := object(config["clients"], "data.limen.config.clients")
	if err != nil {
		return nil, err
	}
	for name, v := range clients {
		if v != false { // Rego: defined and not false
			f.clients[name] = struct{}{}
		}
	}
	roles, err := object(config["roles"], "data.limen.config.roles")
	if err != nil {
		return nil, err
	}
	for name, v := range roles {
		if f.roles[name], err = buildRole(v, "data.limen.config.roles."+name); err != nil {
			return nil, err
		}
	}
	bindings, err := object(config["bindings"], "data.limen.config.bindings")
	if err != nil {
		return nil, err
	}
	if err := buildBindings(&f.local, bindings, "data.limen.config.bindings", true); err != nil {
		return nil, err
	}
	issuers, err := object(bindings["issuers"], "data.limen.config.bindings.issuers")
	if err != nil {
		return nil, err
	}
	for iss, v := range issuers {
		where := "data.limen.config.bindings.issuers." + iss
		entry, err := object(v, where)
		if err != nil {
			return nil, err
		}
		b := &fastBindings{}
		if err := buildBindings(b, entry, where, false); err != nil {
			return nil, err
		}
		f.issuers[iss] = b
	}
	requests, err := object(config["requests"], "data.limen.config.requests")
	if err != nil {
		return nil, err
	}
	for name, v := range requests {
		if f.requests[name], err = buildRequest(v, "data.limen.config.requests."+name); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func buildRole(v any, where string) (*fastRole, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s is not an object", where)
	}
	r := &fastRole{clients: []string{"kubectl"}}
	if cs, ok := m["clients"]; ok {
		list, err := stringList(cs, where+".clients")
		if err != nil {
			return nil, err
		}
		r.clients = r.clients[:0]
		for _, c := range list {
			if c == "*" {
				r.anyClient = true
			} else {
				r.clients = append(r.clients, c)
			}
		}
	}
	if gs, ok := m["groups"]; ok {
		list, err := stringList(gs, where+".groups")
		if err != nil {
			return nil, err
		}
		for _, g := range list {
			if validGroup(g) { // the Rego's own filter, mirrored (input.go)
				r.groups = append(r.groups, g)
			}
		}
	}
	if cl, ok := m["clusters"]; ok {
		sels, ok := cl.([]any)
		if !ok {
			return nil, fmt.Errorf("%s.clusters is not a list", where)
		}
		for i, s := range sels {
			sel, err := buildSelector(s, fmt.Sprintf("%s.clusters[%d]", where, i))
			if err != nil {
				return nil, err
			}
			r.selectors = append(r.selectors, sel)
		}
	}
	return r, nil
}

func buildSelector(v any, where string) (fastSelector, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return fastSelector{}, fmt.Errorf("%s is not an object", where)
	}
	sel := fastSelector{anyName: true}
	if n, ok := m["name"]; ok {
		name, ok := n.(string)
		if !ok {
			return fastSelector{}, fmt.Errorf("%s.name is not a string", where)
		}
		sel.anyName, sel.name = name == "*", name
	}
	// object.get(sel, "labels", {}) is null for a null "labels", and
	// object.subset refuses null: such a selector matches nothing.
	if l, ok := m["labels"]; ok && l == nil {
		return fastSelector{}, fmt.Errorf("%s.labels is null", where)
	}
	labels, err := object(m["labels"], where+".labels")
	if err != nil {
		return fastSelector{}, err
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		s, ok := labels[k].(string)
		if !ok {
			return fastSelector{}, fmt.Errorf("%s.labels.%s is not a string", where, k)
		}
		sel.labels = append(sel.labels, label{k, s})
	}
	return sel, nil
}

// buildBindings reads users, traits and, when local, bots.
func buildBindings(b *fastBindings, m map[string]any, where string, local bool) error {
	var err error
	if b.users, err = roleLists(m["users"], where+".users"); err != nil {
		return err
	}
	if local {
		if b.bots, err = roleLists(m["bots"], where+".bots"); err != nil {
			return err
		}
	}
	traits, err := object(m["traits"], where+".traits")
	if err != nil {
		return err
	}
	b.traits = make(map[string]map[string][]string, len(traits))
	for t, v := range traits {
		if b.traits[t], err = roleLists(v, where+".traits."+t); err != nil {
			return err
		}
	}
	return nil
}

func buildRequest(v any, where string) (*fastRequest, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s is not an object", where)
	}
	q := &fastRequest{}
	sel, ok := m["requesters"]
	if !ok {
		return q, nil
	}
	who, ok := sel.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s.requesters is not an object", where)
	}
	q.hasRequesters = true
	if rs, ok := who["roles"]; ok {
		var err error
		if q.roles, err = stringList(rs, where+".requesters.roles"); err != nil {
			return nil, err
		}
	}
	traits, err := object(who["traits"], where+".requesters.traits")
	if err != nil {
		return nil, err
	}
	q.traits = make(map[string][]string, len(traits))
	for t, vs := range traits {
		if q.traits[t], err = stringList(vs, where+".requesters.traits."+t); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// object reads an object; absent is empty, anything else is refused.
func object(v any, where string) (map[string]any, error) {
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s is not an object", where)
	}
	return m, nil
}

// roleLists reads an object of lists of role names.
func roleLists(v any, where string) (map[string][]string, error) {
	m, err := object(v, where)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]string, len(m))
	for k, list := range m {
		if out[k], err = stringList(list, where+"."+k); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func stringList(v any, where string) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s is not a list", where)
	}
	out := make([]string, len(list))
	for i, x := range list {
		s, ok := x.(string)
		if !ok {
			return nil, fmt.Errorf("%s[%d] is not a string", where, i)
		}
		out[i] = s
	}
	return out, nil
}
