package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/limenhq/limen/gateway/identity"
)

// Cluster is a target cluster as policy sees it: its name and labels.
type Cluster struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
}

// validate bounds cluster input. Names and labels come from the proxy's own
// configuration, so this only rejects values no configuration should hold.
func (c Cluster) validate() error {
	if c.Name == "" || len(c.Name) > identity.MaxNameLen || !printable(c.Name) {
		return fmt.Errorf("%w: cluster name %q is empty, too long or not printable", ErrInvalidInput, c.Name)
	}
	for k, v := range c.Labels {
		if k == "" || len(k) > 317 || len(v) > 63 || !printable(k) || (v != "" && !printable(v)) {
			return fmt.Errorf("%w: cluster %s label %q=%q is not a valid label", ErrInvalidInput, c.Name, k, v)
		}
	}
	return nil
}

func printable(s string) bool {
	for _, r := range s {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// principalTerm is the policy view of p: {kind, name, issuer, traits}, issuer
// "" for a local principal. It is always present, so that a rule can tell
// the provider's bob from the local bob (policies/roles.rego). Building AST
// values directly avoids OPA's reflection-based input conversion.
func principalTerm(p identity.Principal) *ast.Term {
	traits := ast.NewObject()
	for k, vs := range p.Traits {
		vals := make([]*ast.Term, len(vs))
		for i, v := range vs {
			vals[i] = ast.StringTerm(v)
		}
		traits.Insert(ast.StringTerm(k), ast.ArrayTerm(vals...))
	}
	return ast.ObjectTerm(
		ast.Item(ast.InternedTerm("kind"), ast.StringTerm(string(p.Kind))),
		ast.Item(ast.InternedTerm("name"), ast.StringTerm(p.Name)),
		ast.Item(ast.InternedTerm("issuer"), ast.StringTerm(p.Issuer)),
		ast.Item(ast.InternedTerm("traits"), ast.NewTerm(traits)),
	)
}

func clusterTerm(c Cluster) *ast.Term {
	labels := ast.NewObject()
	for k, v := range c.Labels {
		labels.Insert(ast.StringTerm(k), ast.StringTerm(v))
	}
	return ast.ObjectTerm(
		ast.Item(ast.InternedTerm("name"), ast.StringTerm(c.Name)),
		ast.Item(ast.InternedTerm("labels"), ast.NewTerm(labels)),
	)
}

// The client is its own key beside the principal, not one of its traits, so
// that no identity source can set it by naming a trait "client".
//
// requested are the roles of p's approved access requests active on c
// (identity.Principal.ActiveRoles); policy adds their groups only where it
// still lets p request them (policies/requests.rego).
func groupsInput(p identity.Principal, c Cluster, requested []string) ast.Value {
	in := ast.NewObject(
		ast.Item(ast.InternedTerm("client"), ast.StringTerm(p.ClientID)),
		ast.Item(ast.InternedTerm("principal"), principalTerm(p)),
		ast.Item(ast.InternedTerm("cluster"), clusterTerm(c)),
	)
	if len(requested) > 0 {
		terms := make([]*ast.Term, len(requested))
		for i, r := range requested {
			terms[i] = ast.StringTerm(r)
		}
		in.Insert(ast.InternedTerm("requested"), ast.ArrayTerm(terms...))
	}
	return in
}

func clustersInput(p identity.Principal, cs []Cluster) ast.Value {
	terms := make([]*ast.Term, len(cs))
	for i, c := range cs {
		terms[i] = clusterTerm(c)
	}
	return ast.NewObject(
		ast.Item(ast.InternedTerm("client"), ast.StringTerm(p.ClientID)),
		ast.Item(ast.InternedTerm("principal"), principalTerm(p)),
		ast.Item(ast.InternedTerm("clusters"), ast.ArrayTerm(terms...)),
	)
}

// adminInput carries the credential's client: an administrator's
// certificate traded for an application must not administer as the
// command line does (policies/admin.rego decides which clients may).
func adminInput(p identity.Principal, action string) ast.Value {
	return ast.NewObject(
		ast.Item(ast.InternedTerm("client"), ast.StringTerm(p.ClientID)),
		ast.Item(ast.InternedTerm("principal"), principalTerm(p)),
		ast.Item(ast.InternedTerm("action"), ast.StringTerm(action)),
	)
}

// appendCacheKey appends a key that identifies a (principal, client, cluster) triple
// unambiguously: every string is length-prefixed and every map is counted
// and written in key order. Callers pass a stack buffer so that a cache hit
// allocates nothing for the key.
func appendCacheKey(b []byte, p identity.Principal, c Cluster, requested []string) []byte {
	b = appendString(b, string(p.Kind))
	b = appendString(b, p.Name)
	// Provenance: the provider's bob is never answered from the local
	// bob's cached decision.
	b = appendString(b, p.Issuer)
	// The client decides the groups as much as the name: an application
	// must never be answered from kubectl's cached decision.
	b = appendString(b, p.ClientID)
	b = strconv.AppendInt(b, int64(len(p.Traits)), 10)
	var kbuf [8]string
	for _, k := range sortedKeys(kbuf[:0], p.Traits) {
		b = appendString(b, k)
		b = strconv.AppendInt(b, int64(len(p.Traits[k])), 10)
		for _, v := range p.Traits[k] {
			b = appendString(b, v)
		}
	}
	b = appendString(b, c.Name)
	b = strconv.AppendInt(b, int64(len(c.Labels)), 10)
	for _, k := range sortedKeys(kbuf[:0], c.Labels) {
		b = appendString(b, k)
		b = appendString(b, c.Labels[k])
	}
	// An elevated decision is never answered from the plain one, nor the
	// reverse; once a request expires its role leaves the key.
	b = strconv.AppendInt(b, int64(len(requested)), 10)
	for _, r := range requested {
		b = appendString(b, r)
	}
	return b
}

// cacheKey is appendCacheKey as a string, for tests.
func cacheKey(p identity.Principal, c Cluster) string { return string(appendCacheKey(nil, p, c, nil)) }

func appendString(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

func sortedKeys[V any](keys []string, m map[string]V) []string {
	for k := range m {
		keys = append(keys, k)
	}
	if len(keys) > 1 {
		slices.Sort(keys)
	}
	return keys
}

// validGroup mirrors the Rego valid_group rule; the engine re-applies it to
// every decision so that a custom policy cannot hand out a system: group.
func validGroup(g string) bool {
	if g == "" || len(g) > 253 || (len(g) >= 7 && strings.EqualFold(g[:7], "system:")) {
		return false
	}
	for i := 0; i < len(g); i++ {
		c := g[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && strings.IndexByte(":._@-", c) >= 0:
		default:
			return false
		}
	}
	return true
}
