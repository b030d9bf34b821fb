package ca

import (
	"encoding/asn1"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/identity"
)

func TestPrincipalRoundTrip(t *testing.T) {
	p := identity.Principal{Kind: identity.KindUser, Name: "alice", ClientID: "app-1", LoginID: "l-42",
		Traits: map[string][]string{"groups": {"admins", "dev"}, "team": {"ünïcode"}}}
	der, err := EncodePrincipal(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodePrincipal(der)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p) {
		t.Fatalf("round trip: got %+v, want %+v", got, p)
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := asn1.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodePrincipalHostile(t *testing.T) {
	good := principalASN1{Version: PrincipalVersion, Kind: "user", Name: "alice", Traits: []traitASN1{}}
	with := func(f func(*principalASN1)) []byte {
		v := good
		f(&v)
		return mustMarshal(t, v)
	}
	valid := mustMarshal(t, good)
	tests := []struct {
		name string
		der  []byte
	}{
		{"empty", nil},
		{"garbage", []byte{0x30, 0x80, 0x00}},
		{"trailing bytes", append(append([]byte{}, valid...), 0x00)},
		{"version 3", with(func(v *principalASN1) { v.Version = 3 })},
		{"version 1 (no issuer)", mustMarshal(t, struct {
			Version                       int
			Kind, Name, ClientID, LoginID string `asn1:"utf8"`
			Traits                        []traitASN1
		}{Version: 1, Kind: "user", Name: "alice", Traits: []traitASN1{}})},
		{"bad issuer", with(func(v *principalASN1) { v.Issuer = "Corp:x" })},
		{"reserved issuer", with(func(v *principalASN1) { v.Issuer = "local" })},
		{"bot with issuer", with(func(v *principalASN1) { v.Kind, v.Issuer = "bot", "corp" })},
		{"version 0", with(func(v *principalASN1) { v.Version = 0 })},
		{"unknown kind", with(func(v *principalASN1) { v.Kind = "root" })},
		{"system name", with(func(v *principalASN1) { v.Name = "system:admin" })},
		{"empty name", with(func(v *principalASN1) { v.Name = "" })},
		{"colon in name", with(func(v *principalASN1) { v.Name = "a:b" })},
		{"control in login id", with(func(v *principalASN1) { v.LoginID = "x\x00" })},
		{"duplicate trait", with(func(v *principalASN1) {
			v.Traits = []traitASN1{{Name: "groups", Values: []string{"a"}}, {Name: "groups", Values: []string{"admins"}}}
		})},
		{"bad trait value", with(func(v *principalASN1) {
			v.Traits = []traitASN1{{Name: "groups", Values: []string{"a\nb"}}}
		})},
		{"too many traits", with(func(v *principalASN1) {
			for i := 0; i < maxTraits+1; i++ {
				v.Traits = append(v.Traits, traitASN1{Name: "t" + strings.Repeat("x", i+1)})
			}
		})},
		{"oversized", make([]byte, maxExtensionBytes+1)},
		{"worker extension", mustMarshal(t, workerASN1{Version: 1, Cluster: "prod"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if p, err := DecodePrincipal(tt.der); !errors.Is(err, ErrBadExtension) {
				t.Fatalf("DecodePrincipal = %+v, %v; want ErrBadExtension", p, err)
			}
		})
	}
}

func TestWorkerClusterHostile(t *testing.T) {
	if c, err := DecodeWorkerCluster(mustMarshal(t, workerASN1{Version: 1, Cluster: "prod-eu-1"})); err != nil || c != "prod-eu-1" {
		t.Fatalf("valid worker extension: %q, %v", c, err)
	}
	for _, bad := range [][]byte{
		nil,
		mustMarshal(t, workerASN1{Version: 2, Cluster: "prod"}),
		mustMarshal(t, workerASN1{Version: 1, Cluster: "../etc"}),
		mustMarshal(t, workerASN1{Version: 1, Cluster: "Prod"}),
		mustMarshal(t, workerASN1{Version: 1, Cluster: ""}),
		append(mustMarshal(t, workerASN1{Version: 1, Cluster: "prod"}), 1),
	} {
		if c, err := DecodeWorkerCluster(bad); err == nil {
			t.Errorf("DecodeWorkerCluster(%x) = %q, want error", bad, c)
		}
	}
}

func TestValidClusterName(t *testing.T) {
	for s, ok := range map[string]bool{
		"prod": true, "a": true, "eu-1": true,
		// A cluster name is the first label of its server name
		// (CLUSTER.kube.PROXY): no dots, no underscores.
		"eu-1.prod": false, "prod_x": false, "-a": false, "a-": false, "a..b": false,
		"..": false, "a/b": false, "A": false, "a b": false, strings.Repeat("a", 64): false, "a%2f": false,
	} {
		if err := ValidClusterName(s); (err == nil) != ok {
			t.Errorf("ValidClusterName(%q) = %v, want ok=%v", s, err, ok)
		}
	}
}

func FuzzDecodePrincipal(f *testing.F) {
	seed, _ := EncodePrincipal(identity.Principal{Kind: identity.KindBot, Name: "ci",
		Traits: map[string][]string{"groups": {"deploy"}}})
	f.Add(seed)
	f.Add([]byte{0x30, 0x03, 0x02, 0x01, 0x01})
	f.Fuzz(func(t *testing.T, der []byte) {
		p, err := DecodePrincipal(der)
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("decoded an invalid principal %+v: %v", p, err)
		}
		again, err := EncodePrincipal(p)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", p, err)
		}
		p2, err := DecodePrincipal(again)
		if err != nil || !reflect.DeepEqual(p, p2) {
			t.Fatalf("re-decode: %+v, %v; want %+v", p2, err, p)
		}
	})
}

func FuzzDecodeWorkerCluster(f *testing.F) {
	seed, _ := EncodeWorkerCluster("prod")
	f.Add(seed)
	f.Fuzz(func(t *testing.T, der []byte) {
		c, err := DecodeWorkerCluster(der)
		if err == nil && ValidClusterName(c) != nil {
			t.Fatalf("accepted invalid cluster %q", c)
		}
	})
}

func TestParseFingerprint(t *testing.T) {
	hex := strings.Repeat("ab", 32)
	want := "sha256:" + hex
	colons := strings.TrimSuffix(strings.Repeat("AB:", 32), ":")
	for in, ok := range map[string]bool{
		want: true, hex: true, "SHA256:" + strings.ToUpper(hex): true, colons: true, " " + want + "\n": true,
		"": false, "sha256:": false, want + "00": false, "sha256:" + hex[:62]: false, "md5:" + hex: false,
		"sha256:" + strings.Repeat("zz", 32): false, strings.Repeat("a:", 63) + "a": false,
	} {
		got, err := ParseFingerprint(in)
		if (err == nil) != ok || (ok && got != want) {
			t.Errorf("ParseFingerprint(%q) = %q, %v; want ok=%v", in, got, err, ok)
		}
	}
}

func FuzzParseFingerprint(f *testing.F) {
	f.Add("sha256:" + strings.Repeat("0f", 32))
	f.Add(strings.Repeat("0F:", 31) + "0F")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseFingerprint(s)
		if err != nil {
			return
		}
		if again, err := ParseFingerprint(got); err != nil || again != got {
			t.Fatalf("canonical form %q does not re-parse: %q, %v", got, again, err)
		}
	})
}

// An identity provider's user keeps its issuer through the certificate, so
// the proxy never reads it back as the local user of the same name.
func TestPrincipalRoundTripIssuer(t *testing.T) {
	p := identity.Principal{Kind: identity.KindUser, Name: "bob", Issuer: "corp", ClientID: "kubectl"}
	der, err := EncodePrincipal(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodePrincipal(der)
	if err != nil || !reflect.DeepEqual(got, p) || got.Same(identity.Principal{Kind: identity.KindUser, Name: "bob"}) {
		t.Fatalf("got %+v, %v; want %+v", got, err, p)
	}
}

func TestPrincipalRoundTripMinimal(t *testing.T) {
	p := identity.Principal{Kind: identity.KindBot, Name: "ci"}
	der, err := EncodePrincipal(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodePrincipal(der); err != nil || !reflect.DeepEqual(got, p) {
		t.Fatalf("got %+v, %v; want %+v", got, err, p)
	}
}

func FuzzParseCSR(f *testing.F) {
	key, _ := NewKey()
	csr, _ := NewCSR(key, "alice")
	f.Add(csr)
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nMAA=\n-----END CERTIFICATE REQUEST-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCSR(data)
		if err == nil && CheckPublicKey(c.PublicKey) != nil {
			t.Fatalf("accepted a CSR with an unacceptable key %T", c.PublicKey)
		}
	})
}
