package grant

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

// TestSignerReusesOnlyTheSameDecision: one signature per principal,
// cluster, groups and revision within Reuse, and never past the client
// certificate.
func TestSignerReusesOnlyTheSameDecision(t *testing.T) {
	pub, priv := testKey(t, 1)
	certExpiry := t0.Add(time.Hour)
	at := func(d time.Duration, mut func(*Grant)) Grant {
		g := validGrant()
		g.IssuedAt, g.ExpiresAt = t0.Add(d), t0.Add(d+10*time.Minute)
		if mut != nil {
			mut(&g)
		}
		return g
	}
	s := &Signer{Key: priv, Reuse: time.Minute}
	first, fg, err := s.Sign(at(0, nil), "rev-1", certExpiry)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(pub, first, "prod-1", t0.Add(time.Second)); err != nil {
		t.Fatalf("the signed grant does not verify: %v", err)
	}
	if !fg.IssuedAt.Equal(t0) || len(fg.Groups) != 2 {
		t.Fatalf("returned grant %+v is not what was signed", fg)
	}
	tests := []struct {
		name       string
		g          Grant
		revision   string
		certExpiry time.Time
		reused     bool
	}{
		{"same decision 30s later", at(30*time.Second, nil), "rev-1", certExpiry, true},
		{"groups in another order", at(30*time.Second, func(g *Grant) { g.Groups = []string{"limen:edit", "limen:view"} }), "rev-1", certExpiry, true},
		{"after Reuse", at(time.Minute, nil), "rev-1", certExpiry, false},
		{"another revision", at(time.Second, nil), "rev-2", certExpiry, false},
		{"other groups", at(time.Second, func(g *Grant) { g.Groups = []string{"limen:view"} }), "rev-1", certExpiry, false},
		{"another cluster", at(time.Second, func(g *Grant) { g.Cluster = "prod-2" }), "rev-1", certExpiry, false},
		{"another principal", at(time.Second, func(g *Grant) { g.Principal.Name = "bob" }), "rev-1", certExpiry, false},
		{"a bot of the same name", at(time.Second, func(g *Grant) { g.Principal.Kind = identity.KindBot }), "rev-1", certExpiry, false},
		{"another client", at(time.Second, func(g *Grant) { g.Principal.ClientID = "coffee-menu" }), "rev-1", certExpiry, false},
		{"other traits", at(time.Second, func(g *Grant) { g.Principal.Traits = map[string][]string{"team": {"b"}} }), "rev-1", certExpiry, false},
		{"another login of the same person", at(time.Second, func(g *Grant) { g.Principal.LoginID = "login-2" }), "rev-1", certExpiry, false},
		{"a certificate expiring before the cached grant", at(time.Second, func(g *Grant) { g.ExpiresAt = t0.Add(5 * time.Minute) }), "rev-1", t0.Add(5 * time.Minute), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Signer{Key: priv, Reuse: time.Minute}
			if _, _, err := s.Sign(at(0, nil), "rev-1", certExpiry); err != nil {
				t.Fatal(err)
			}
			tok, g, err := s.Sign(tt.g, tt.revision, tt.certExpiry)
			if err != nil {
				t.Fatal(err)
			}
			if reused := bytes.Equal(tok, first); reused != tt.reused {
				t.Fatalf("reused = %v, want %v", reused, tt.reused)
			}
			if g.ExpiresAt.After(tt.certExpiry) {
				t.Fatalf("grant expires %s, after the certificate (%s)", g.ExpiresAt, tt.certExpiry)
			}
		})
	}
	never := &Signer{Key: priv, Reuse: -1}
	if _, _, err := never.Sign(at(0, nil), "rev-1", certExpiry); err != nil || len(never.cache) != 0 {
		t.Fatalf("a Signer with negative Reuse cached a grant (%v)", err)
	}
}

// TestVerifierCacheStillChecksTimeAndSignature: a cached grant still
// expires, and a token differing by one bit is verified afresh and refused.
func TestVerifierCacheStillChecksTimeAndSignature(t *testing.T) {
	pub, priv := testKey(t, 1)
	good, err := Sign(priv, validGrant())
	if err != nil {
		t.Fatal(err)
	}
	v := &Verifier{Key: pub, Cluster: "prod-1"}
	if _, err := v.Verify(good, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	g, err := v.Verify(good, t0.Add(2*time.Minute))
	if err != nil || g.Principal.Name != "alice" {
		t.Fatalf("cached grant: %+v, %v", g, err)
	}
	g.Groups[0] = "system:masters" // a caller's change must not reach the cache
	if g, _ := v.Verify(good, t0.Add(2*time.Minute)); g.Groups[0] != "limen:edit" {
		t.Fatalf("the cache was changed through a returned grant: %v", g.Groups)
	}
	if _, err := v.Verify(good, t0.Add(5*time.Minute)); !errors.Is(err, ErrExpired) {
		t.Fatalf("cached grant after its expiry: %v, want ErrExpired", err)
	}
	if _, err := v.Verify(good, t0.Add(-time.Hour)); !errors.Is(err, ErrNotYetValid) {
		t.Fatalf("cached grant before its issue: %v, want ErrNotYetValid", err)
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)-1] ^= 1
	if _, err := v.Verify(flipped, t0.Add(time.Minute)); !errors.Is(err, ErrForged) {
		t.Fatalf("flipped token: %v, want ErrForged", err)
	}
	other := &Verifier{Key: pub, Cluster: "prod-2"}
	if _, err := other.Verify(good, t0.Add(time.Minute)); !errors.Is(err, ErrWrongCluster) {
		t.Fatalf("other cluster: %v", err)
	}
	if len(v.cache) != 1 {
		t.Fatalf("cache holds %d grants, want only the one that verified", len(v.cache))
	}
}

func BenchmarkVerifierCached(b *testing.B) {
	pub, priv := testKey(b, 1)
	token, err := Sign(priv, validGrant())
	if err != nil {
		b.Fatal(err)
	}
	v := &Verifier{Key: pub, Cluster: "prod-1"}
	now := t0.Add(time.Minute)
	for b.Loop() {
		if _, err := v.Verify(token, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSignerReused is the proxy's per-request cost of a grant when the
// decision was signed moments ago: building the decision's key and the
// cache lookup.
func BenchmarkSignerReused(b *testing.B) {
	_, priv := testKey(b, 1)
	s := &Signer{Key: priv, Reuse: time.Minute}
	g := validGrant()
	g.Principal.ClientID, g.Principal.LoginID = identity.ClientKubectl, "0123456789abcdef01234567"
	if _, _, err := s.Sign(g, "rev-1", t0.Add(time.Hour)); err != nil {
		b.Fatal(err)
	}
	g.IssuedAt = t0.Add(time.Second)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := s.Sign(g, "rev-1", t0.Add(time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
}
