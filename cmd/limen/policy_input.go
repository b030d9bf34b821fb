package main

import (
	"fmt"
	"iter"
	"maps"
	"strings"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/policy"
)

// evalInput builds the principal and cluster of `limen policy eval` and
// validates them exactly as the engine will.
func evalInput(name, kind string, traits []string, cluster string, labels []string) (identity.Principal, policy.Cluster, error) {
	var c policy.Cluster
	p := identity.Principal{Kind: identity.Kind(kind), Name: name}
	if name == "" {
		return p, c, fmt.Errorf("principal: required (--principal NAME)")
	}
	if cluster == "" {
		return p, c, fmt.Errorf("cluster: required (--cluster NAME)")
	}
	var err error
	if p.Traits, err = parsePairs("traits", traits); err != nil {
		return p, c, err
	}
	if err := p.Validate(); err != nil {
		return p, c, fmt.Errorf("principal: %w", err)
	}
	c.Name = cluster
	l, err := parsePairs("labels", labels)
	if err != nil {
		return p, c, err
	}
	for k, vs := range l {
		if len(vs) > 1 {
			return p, c, fmt.Errorf("labels: %s is given %d times; a cluster label has one value", k, len(vs))
		}
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		c.Labels[k] = vs[0]
	}
	return p, c, nil
}

// parsePairs reads NAME=VALUE items; a name may repeat (traits are lists).
func parsePairs(flag string, items []string) (map[string][]string, error) {
	if len(items) == 0 {
		return nil, nil
	}
	out := map[string][]string{}
	for _, it := range items {
		k, v, ok := strings.Cut(it, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%s: %q is not NAME=VALUE", flag, it)
		}
		out[k] = append(out[k], v)
	}
	return out, nil
}

func mapsKeys[V any](m map[string]V) iter.Seq[string] { return maps.Keys(m) }
