package ca

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/limenhq/limen/gateway/identity"
)

func memoLen(pm *principalMemo) int {
	n := 0
	pm.m.Range(func(any, any) bool { n++; return true })
	return n
}

// TestPrincipalDecodedOncePerCertificate: requests on one connection
// share its parsed certificate and so one decoded principal; another
// certificate gets its own; a refused certificate is not remembered; an
// entry goes when its certificate is collected.
func TestPrincipalDecodedOncePerCertificate(t *testing.T) {
	a := openCA(t, Options{})
	key, _ := NewKey()
	alice := identity.Principal{Kind: identity.KindUser, Name: "alice", Traits: map[string][]string{"groups": {"dev"}}}
	bob := identity.Principal{Kind: identity.KindUser, Name: "bob"}
	ac, err := a.IssueUser(key.Public(), alice, 0)
	if err != nil {
		t.Fatal(err)
	}
	bc, _ := a.IssueUser(key.Public(), bob, 0)
	chain := func(c *x509.Certificate) [][]*x509.Certificate { return [][]*x509.Certificate{{c, a.user.cert}} }

	for range 3 {
		p, err := a.PrincipalFromChains(chain(ac))
		if err != nil || p.String() != "user:alice" || p.Traits["groups"][0] != "dev" {
			t.Fatalf("alice: %v, %v", p, err)
		}
	}
	if p, err := a.PrincipalFromChains(chain(bc)); err != nil || p.String() != "user:bob" {
		t.Fatalf("bob: %v, %v", p, err)
	}
	if n := memoLen(&a.principals); n != 2 {
		t.Fatalf("memo holds %d principals, want 2 (one per certificate)", n)
	}
	// A copy of alice's certificate parsed anew (another connection) is
	// another entry, with the same principal.
	again, _ := x509.ParseCertificate(ac.Raw)
	if p, err := a.PrincipalFromChains(chain(again)); err != nil || p.String() != "user:alice" {
		t.Fatalf("alice again: %v, %v", p, err)
	}

	bad, _ := a.sign(&x509.Certificate{Subject: pkix.Name{CommonName: "alice"}, NotBefore: time.Now().Add(-time.Minute),
		NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		ExtraExtensions: []pkix.Extension{{Id: OIDPrincipal, Value: []byte{0x30, 0x00}}}}, a.user, key.Public())
	for range 2 {
		if _, err := a.PrincipalFromChains(chain(bad)); err == nil {
			t.Fatal("a malformed principal extension was accepted")
		}
	}
	if _, ok := a.principals.m.Load(weak.Make(bad)); ok {
		t.Fatal("a refused certificate was remembered")
	}

	// Drop every certificate: their entries go with them.
	ac, bc, again, bad = nil, nil, nil, nil
	deadline := time.Now().Add(10 * time.Second)
	for memoLen(&a.principals) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("memo still holds %d principals after their certificates were collected", memoLen(&a.principals))
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}
