package policy

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

// FuzzReadBundle feeds arbitrary bytes to the bundle reader: no panic, every
// error wraps ErrBundleRefused, and with a key configured only the signed
// seed's content is accepted. (Compilation is covered by the table tests: a
// fuzzed bundle that verifies has the seed's content.)
func FuzzReadBundle(f *testing.F) {
	priv, pub := testKeys(f)
	f0 := buildBundle(f, "1", defaultRego(f), bobData("limen:view"), priv)
	f.Add(f0)
	f.Add(buildBundle(f, "1", defaultRego(f), bobData("limen:view"), nil))
	f.Add([]byte("\x1f\x8b\x08\x00\x00\x00\x00\x00"))
	f.Add([]byte{})
	v := &verifier{keyID: DefaultKeyID, alg: DefaultKeyAlgorithm, key: pub}
	want, err := readBundle(f0, v, 1<<20)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, ver := range []*verifier{v, nil} {
			var c content
			var err error
			done := make(chan struct{})
			go func() { c, err = readBundle(raw, ver, 1<<20); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("readBundle hangs on %d bytes", len(raw))
			}
			if err != nil {
				if !errors.Is(err, ErrBundleRefused) {
					t.Fatalf("error %v does not wrap ErrBundleRefused", err)
				}
				continue
			}
			if n, perr := ParseRevision(c.revision); perr != nil || c.mark == nil || c.mark.n != n || c.mark.revision != c.revision {
				t.Fatalf("accepted a bundle without an ordered revision: %q (%v), mark %+v", c.revision, perr, c.mark)
			}
			if ver != nil && !sameContent(c, want) {
				t.Fatalf("a modified bundle passed verification (revision %s)", c.revision)
			}
		}
	})
}

// sameContent compares what a bundle would activate: the archive bytes may
// differ (gzip header, trailing bytes) under the same signature.
func sameContent(a, b content) bool {
	if a.revision != b.revision || *a.mark != *b.mark || len(a.modules) != len(b.modules) || !reflect.DeepEqual(a.data, b.data) {
		return false
	}
	for path, m := range a.modules {
		if o, ok := b.modules[path]; !ok || !m.Equal(o) {
			return false
		}
	}
	return true
}

// FuzzCacheKey checks that two different (principal, cluster) pairs never
// share a cache key.
func FuzzCacheKey(f *testing.F) {
	f.Add("alice", "groups", "dev", "demo", "env", "dev", "alice", "groups", "dev", "demo", "env", "dev2")
	f.Add("ab", "", "", "c", "", "", "a", "", "", "bc", "", "")
	f.Fuzz(func(t *testing.T, n1, t1, v1, c1, k1, l1, n2, t2, v2, c2, k2, l2 string) {
		mk := func(n, tk, tv, c, lk, lv string) (identity.Principal, Cluster) {
			p := identity.Principal{ClientID: "kubectl", Kind: identity.KindUser, Name: n}
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
