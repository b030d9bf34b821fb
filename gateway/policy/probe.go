package policy

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/limenhq/limen/gateway/identity"
)

// Probe bounds: activation evaluates at most maxProbePrincipals ×
// maxProbeClusters decisions in all (shared by the clients), so a large
// bundle still activates in well under a second.
const (
	maxProbePrincipals = 512
	// maxProbeClients bounds the clients probed (in name order); the
	// engine filters every decision again at run time.
	maxProbeClients  = 16
	maxProbeClusters = 16
)

// probe evaluates groups for the principals and clusters that the bundle's
// data names and refuses the bundle if any decision holds a group outside
// valid_group (a system: group above all). The Rego filters such groups and
// the data validation names them; this check catches a policy that was
// edited to grant them anyway. Decisions are filtered again at run time.
func probe(ctx context.Context, s *snapshot, data map[string]any) error {
	config, _ := dig(data, "limen", "config").(map[string]any)
	principals := probePrincipals(config)
	clusters := probeClusters(config)
	clients := s.scopes.Names()
	slices.Sort(clients)
	if len(clients) > maxProbeClients {
		clients = clients[:maxProbeClients]
	}
	budget := maxProbePrincipals * maxProbeClusters
	for _, client := range clients {
		if err := probeClient(ctx, s, client, principals, clusters, &budget); err != nil {
			return err
		}
	}
	return nil
}

// probeClient probes one registered client's decisions: roles decide per
// client, so a system: group could hide behind any of them.
func probeClient(ctx context.Context, s *snapshot, client string, principals []identity.Principal, clusters []Cluster, budget *int) error {
	for _, p := range principals {
		p.ClientID = client
		for _, c := range clusters {
			if *budget--; *budget < 0 {
				return nil
			}
			good, bad, err := s.evalGroups(ctx, groupsInput(p, c, nil))
			if err != nil {
				return fmt.Errorf("%w: probe %s on cluster %s: %v", ErrBundleRefused, p, c.Name, err)
			}
			if len(bad) > 0 {
				return fmt.Errorf("%w: policy would grant %q to %s on cluster %s: groups must be well formed and never start with \"system:\"",
					ErrBundleRefused, bad, p, c.Name)
			}
			checkFastPath(s, p, c, good)
		}
	}
	return nil
}

// checkFastPath compares the fast path with the Rego decision want and
// turns it off for this snapshot at the first difference: a wrong index
// costs speed, never a wrong answer.
func checkFastPath(s *snapshot, p identity.Principal, c Cluster, want []string) {
	if s.fast == nil {
		return
	}
	if got := s.fast.groups(p, c, nil); !slices.Equal(got, want) {
		s.fast, s.fastOff = nil, fmt.Sprintf("the index answered %q for %s on cluster %s where Rego answers %q", got, p, c.Name, want)
	}
}

func dig(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// probePrincipals: one principal per trait binding, then named users and
// bots, local first and then each identity provider's (bindings.issuers).
func probePrincipals(config map[string]any) []identity.Principal {
	var out []identity.Principal
	add := func(p identity.Principal) bool {
		out = append(out, p)
		return len(out) < maxProbePrincipals
	}
	if !add(identity.Principal{Kind: identity.KindUser, Name: "limen-probe"}) {
		return out
	}
	bindings, _ := dig(config, "bindings").(map[string]any)
	if !probeSource(bindings, "", add) {
		return out
	}
	issuers, _ := dig(bindings, "issuers").(map[string]any)
	for _, iss := range slices.Sorted(maps.Keys(issuers)) {
		if identity.ValidIssuer(iss) != nil {
			continue // validation refuses the bundle already
		}
		entry, _ := issuers[iss].(map[string]any)
		if !probeSource(entry, iss, add) {
			return out
		}
	}
	return out
}

// probeSource adds one principal of issuer per trait binding and per named
// user (and, for local bindings, per named bot) of bindings; false when
// add had enough.
func probeSource(bindings map[string]any, issuer string, add func(identity.Principal) bool) bool {
	traits, _ := dig(bindings, "traits").(map[string]any)
	for _, trait := range slices.Sorted(maps.Keys(traits)) {
		values, _ := traits[trait].(map[string]any)
		for _, v := range slices.Sorted(maps.Keys(values)) {
			p := identity.Principal{Kind: identity.KindUser, Name: "limen-probe", Issuer: issuer, Traits: map[string][]string{trait: {v}}}
			if !add(p) {
				return false
			}
		}
	}
	kinds := []identity.Kind{identity.KindUser, identity.KindBot}
	if issuer != "" {
		kinds = kinds[:1] // bots are local
	}
	for _, kind := range kinds {
		names, _ := dig(bindings, string(kind)+"s").(map[string]any)
		for _, name := range slices.Sorted(maps.Keys(names)) {
			if !add(identity.Principal{Kind: kind, Name: name, Issuer: issuer}) {
				return false
			}
		}
	}
	return true
}

// probeClusters: one cluster per distinct role selector, plus one that no
// selector names.
func probeClusters(config map[string]any) []Cluster {
	out := []Cluster{{Name: "limen-probe"}}
	roles, _ := dig(config, "roles").(map[string]any)
	for _, name := range slices.Sorted(maps.Keys(roles)) {
		sels, _ := dig(roles[name], "clusters").([]any)
		for _, sel := range sels {
			if len(out) >= maxProbeClusters {
				return out
			}
			c := Cluster{Name: "limen-probe", Labels: map[string]string{}}
			if n, ok := dig(sel, "name").(string); ok && n != "" && n != "*" {
				c.Name = n
			}
			labels, _ := dig(sel, "labels").(map[string]any)
			for k, v := range labels {
				if s, ok := v.(string); ok {
					c.Labels[k] = s
				}
			}
			out = append(out, c)
		}
	}
	return out
}
