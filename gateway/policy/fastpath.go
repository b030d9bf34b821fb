package policy

import (
	"slices"

	"github.com/limenhq/limen/gateway/identity"
)

// fastPath answers data.limen.kube.groups from an index of the bundle's
// data built at activation, without evaluating Rego: a decision that misses
// the cache costs a few map lookups instead of a full evaluation (issue
// #33). It mirrors policies/kube.rego, roles.rego and requests.rego rule by
// rule, so it exists only for a bundle whose modules for those packages are
// Limen's own (understandFastPath) and whose data has the shapes those
// rules read (buildFastPath). Any other bundle is answered by the Rego
// evaluation; the Rego stays the source of truth, and activation compares
// the two on every probed decision (probe.go).
//
// A fastPath is immutable once built, so decisions need no lock.
type fastPath struct {
	// clients are the registered clients: data.limen.config.clients[c] is
	// defined and not false.
	clients map[string]struct{}
	roles   map[string]*fastRole
	// local are bindings.users, .bots and .traits; issuers are
	// bindings.issuers, by provider.
	local   fastBindings
	issuers map[string]*fastBindings
	// requests are data.limen.config.requests: the requestable roles.
	requests map[string]*fastRequest
}

// fastBindings are one source's bindings: name (or trait, value) → roles.
type fastBindings struct {
	users  map[string][]string
	bots   map[string][]string
	traits map[string]map[string][]string
}

// fastRole is one data.limen.config.roles entry, as kube.groups reads it.
type fastRole struct {
	// anyClient is a "*" in clients; clients are the others (["kubectl"]
	// when the role has no "clients").
	anyClient bool
	clients   []string
	selectors []fastSelector
	// groups are the role's groups that pass valid_group, in data order.
	groups []string
}

// fastSelector is one cluster selector: a name ("" with anyName for an
// absent name or "*") and labels that must all be equal.
type fastSelector struct {
	anyName bool
	name    string
	labels  []label
}

type label struct{ key, value string }

// fastRequest is one data.limen.config.requests entry's requesters; a
// rule without requesters matches nobody.
type fastRequest struct {
	hasRequesters bool
	roles         []string
	traits        map[string][]string
}

// maxInlineRoles is how many bound role names a decision collects without
// allocating.
const maxInlineRoles = 16

// groups is data.limen.kube.groups for (p, c, requested), filtered, sorted
// and deduplicated as evalGroups returns it. It cannot fail: every shape it
// could not answer was refused when the index was built.
func (f *fastPath) groups(p identity.Principal, c Cluster, requested []string) []string {
	if _, ok := f.clients[p.ClientID]; !ok {
		return nil
	}
	var buf [maxInlineRoles]string
	bound := f.bound(buf[:0], p)
	var out []string
	// groups contains g if: some role in roles.bound, its role exists,
	// serves the client and selects the cluster.
	for _, name := range bound {
		if r := f.roles[name]; r != nil && r.serves(p.ClientID) && r.selects(c) {
			out = append(out, r.groups...)
		}
	}
	// groups contains g if: some role in requests.elevated (requested,
	// requestable by p, selecting the cluster) that serves the client.
	for _, name := range requested {
		rule := f.requests[name]
		if rule == nil || !rule.matches(p, bound) {
			continue
		}
		if r := f.roles[name]; r != nil && r.serves(p.ClientID) && r.selects(c) {
			out = append(out, r.groups...)
		}
	}
	if len(out) > 1 {
		slices.Sort(out)
		out = slices.Compact(out)
	}
	return out
}

// bound appends roles.bound: the role names bound to p through its own
// source's bindings (duplicates included; callers deduplicate groups).
func (f *fastPath) bound(out []string, p identity.Principal) []string {
	src := &f.local
	if p.Issuer != "" {
		if src = f.issuers[p.Issuer]; src == nil {
			return out
		}
	}
	switch {
	case p.Kind == identity.KindUser:
		out = append(out, src.users[p.Name]...)
	case p.Kind == identity.KindBot && p.Issuer == "":
		out = append(out, src.bots[p.Name]...)
	}
	// A provider binds only its users by trait (roles.rego); local traits
	// bind whatever the kind.
	if p.Issuer != "" && p.Kind != identity.KindUser {
		return out
	}
	for trait, values := range p.Traits {
		byValue := src.traits[trait]
		if byValue == nil {
			continue
		}
		for _, v := range values {
			out = append(out, byValue[v]...)
		}
	}
	return out
}

// serves is roles.serves.
func (r *fastRole) serves(client string) bool {
	return r.anyClient || slices.Contains(r.clients, client)
}

// selects is roles.selects: one selector whose name is absent, "*" or the
// cluster's, and whose labels the cluster's labels all hold.
func (r *fastRole) selects(c Cluster) bool {
	for i := range r.selectors {
		if r.selectors[i].matches(c) {
			return true
		}
	}
	return false
}

func (s *fastSelector) matches(c Cluster) bool {
	if !s.anyName && s.name != c.Name {
		return false
	}
	for _, l := range s.labels {
		if v, ok := c.Labels[l.key]; !ok || v != l.value {
			return false
		}
	}
	return true
}

// matches is requests.matches(rule.requesters): p holds one of the roles
// (bound, never requested), or p is local and has one of the trait values.
func (q *fastRequest) matches(p identity.Principal, bound []string) bool {
	if !q.hasRequesters {
		return false
	}
	for _, r := range q.roles {
		if slices.Contains(bound, r) {
			return true
		}
	}
	if p.Issuer != "" {
		return false
	}
	for trait, values := range q.traits {
		for _, v := range p.Traits[trait] {
			if slices.Contains(values, v) {
				return true
			}
		}
	}
	return false
}
