package identity

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		p    Principal
		ok   bool
	}{
		{"user", Principal{Kind: KindUser, Name: "alice", Traits: map[string][]string{"groups": {"dev"}}}, true},
		{"bot", Principal{Kind: KindBot, Name: "ci-deployer"}, true},
		{"unknown kind", Principal{Kind: "robot", Name: "x"}, false},
		{"empty name", Principal{Kind: KindUser}, false},
		{"colon", Principal{Kind: KindUser, Name: "a:b"}, false},
		{"space", Principal{Kind: KindUser, Name: "a b"}, false},
		{"system prefix", Principal{Kind: KindUser, Name: "system:admin"}, false},
		{"systemic prefix", Principal{Kind: KindUser, Name: "systemd"}, false},
		{"control byte", Principal{Kind: KindUser, Name: "a\x00b"}, false},
		{"invalid utf8", Principal{Kind: KindUser, Name: "a\xffb"}, false},
		{"too long", Principal{Kind: KindUser, Name: strings.Repeat("a", 254)}, false},
		{"bad trait key", Principal{Kind: KindUser, Name: "a", Traits: map[string][]string{"": {"x"}}}, false},
		{"bad trait value", Principal{Kind: KindUser, Name: "a", Traits: map[string][]string{"g": {"x\n"}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func FuzzValidName(f *testing.F) {
	for _, s := range []string{"alice", "", "system:x", "a\x00", strings.Repeat("z", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidName(s) == nil && (s == "" || len(s) > MaxNameLen || strings.ContainsAny(s, ": \t\r\n")) {
			t.Fatalf("accepted %q", s)
		}
	})
}

func TestProvenance(t *testing.T) {
	local := Principal{Kind: KindUser, Name: "bob"}
	idp := Principal{Kind: KindUser, Name: "bob", Issuer: "corp"}
	if local.Same(idp) || idp.Same(local) || !idp.Same(Principal{Kind: KindUser, Name: "bob", Issuer: "corp", ClientID: "console"}) {
		t.Fatal("Same must compare kind, issuer and name, and only those")
	}
	if local.String() != "user:bob" || idp.String() != "user:corp:bob" || idp.QualifiedName() != "corp:bob" {
		t.Fatalf("String %q / %q, QualifiedName %q", local, idp, idp.QualifiedName())
	}
	if local.Provenance() != "local" || idp.Provenance() != "corp" {
		t.Fatalf("Provenance %q / %q", local.Provenance(), idp.Provenance())
	}
	for _, p := range []Principal{local, idp, {Kind: KindBot, Name: "ci"}} {
		back, err := ParsePrincipal(p.String())
		if err != nil || !back.Same(p) {
			t.Fatalf("ParsePrincipal(%q) = %+v, %v", p.String(), back, err)
		}
	}
	if p, err := ParsePrincipal("bob"); err != nil || !p.Same(local) {
		t.Fatalf("bare name: %+v, %v", p, err)
	}
	for _, s := range []string{"bot:corp:ci", "user:Corp:bob", "user:local:bob", "user::bob", "user:corp:", "user:a:b:c", "robot:x"} {
		if p, err := ParsePrincipal(s); err == nil {
			t.Errorf("ParsePrincipal(%q) accepted %+v", s, p)
		}
	}
}

func TestValidIssuer(t *testing.T) {
	for s, ok := range map[string]bool{"corp": true, "okta-eu": true, "a1": true, "": false, "Corp": false, "-x": false,
		"local": false, "bot": false, "user": false, "systemd": false, "a:b": false, "a.b": false, strings.Repeat("a", 64): false} {
		if err := ValidIssuer(s); (err == nil) != ok {
			t.Errorf("ValidIssuer(%q) = %v, want ok=%v", s, err, ok)
		}
	}
	if err := (Principal{Kind: KindBot, Name: "ci", Issuer: "corp"}).Validate(); err == nil {
		t.Error("a bot with an issuer was accepted: bots are local")
	}
}

// FuzzParsePrincipal: whatever it accepts is valid and reads back the same.
func FuzzParsePrincipal(f *testing.F) {
	for _, s := range []string{"bob", "user:bob", "bot:ci", "user:corp:bob", "user:corp:", "a:b:c:d", "user:local:x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePrincipal(s)
		if err != nil {
			return
		}
		if verr := p.Validate(); verr != nil {
			t.Fatalf("accepted invalid %+v: %v", p, verr)
		}
		back, err := ParsePrincipal(p.String())
		if err != nil || !back.Same(p) {
			t.Fatalf("%q → %+v → %q → %+v, %v", s, p, p.String(), back, err)
		}
	})
}
