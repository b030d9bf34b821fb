package policy

import (
	"context"
	"errors"
	"testing"

	"github.com/limenhq/limen/gateway/identity"
)

// FuzzReadBundle feeds arbitrary bytes to the bundle reader and the
// activation checks: no panic, and with a key configured nothing unsigned
// or badly signed is ever accepted.
func FuzzReadBundle(f *testing.F) {
	priv, pub := testKeys(f)
	f.Add(buildBundle(f, "seed", defaultRego(f), bobData("limen:view"), priv))
	f.Add(buildBundle(f, "seed", defaultRego(f), bobData("limen:view"), nil))
	f.Add([]byte("\x1f\x8b\x08\x00\x00\x00\x00\x00"))
	f.Add([]byte{})
	v := &verifier{keyID: DefaultKeyID, alg: DefaultKeyAlgorithm, key: pub}
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, ver := range []*verifier{v, nil} {
			c, err := readBundle(raw, ver, 1<<20)
			if err != nil {
				if !errors.Is(err, ErrBundleRefused) {
					t.Fatalf("error %v does not wrap ErrBundleRefused", err)
				}
				continue
			}
			s, err := compile(context.Background(), c, 16)
			if err != nil {
				continue
			}
			if _, _, err := s.evalGroups(context.Background(), groupsInput(bob, demo)); err != nil && !errors.Is(err, ErrUnavailable) {
				t.Fatal(err)
			}
		}
	})
}

// FuzzCacheKey checks that two different (principal, cluster) pairs never
// share a cache key.
func FuzzCacheKey(f *testing.F) {
	f.Add("alice", "groups", "dev", "demo", "env", "dev", "alice", "groups", "dev", "demo", "env", "dev2")
	f.Add("ab", "", "", "c", "", "", "a", "", "", "bc", "", "")
	f.Fuzz(func(t *testing.T, n1, t1, v1, c1, k1, l1, n2, t2, v2, c2, k2, l2 string) {
		mk := func(n, tk, tv, c, lk, lv string) (identity.Principal, Cluster) {
			p := identity.Principal{Kind: identity.KindUser, Name: n}
			if tk != "" {
				p.Traits = map[string][]string{tk: {tv}}
			}
			cl := Cluster{Name: c}
			if lk != "" {
				cl.Labels = map[string]string{lk: lv}
			}
			return p, cl
		}
		p1, cl1 := mk(n1, t1, v1, c1, k1, l1)
		p2, cl2 := mk(n2, t2, v2, c2, k2, l2)
		same := n1 == n2 && c1 == c2 && t1 == t2 && (t1 == "" || v1 == v2) && k1 == k2 && (k1 == "" || l1 == l2)
		if (cacheKey(p1, cl1) == cacheKey(p2, cl2)) != same {
			t.Fatalf("key collision or mismatch: %q vs %q", cacheKey(p1, cl1), cacheKey(p2, cl2))
		}
	})
}
