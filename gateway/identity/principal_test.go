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
