package impersonate

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/identity"
)

// TestUserMapping: users map to PREFIX+NAME, bots to PREFIX+"bot:"+NAME,
// and every name that could reach another principal's Kubernetes user, a
// "system:" name or a header it does not belong in is refused.
func TestUserMapping(t *testing.T) {
	user := func(n string) identity.Principal { return identity.Principal{Kind: identity.KindUser, Name: n} }
	bot := func(n string) identity.Principal { return identity.Principal{Kind: identity.KindBot, Name: n} }
	idp := func(iss, n string) identity.Principal {
		return identity.Principal{Kind: identity.KindUser, Name: n, Issuer: iss}
	}
	tests := []struct {
		name   string
		prefix string
		p      identity.Principal
		want   string // "" means refused
	}{
		{"user, no prefix: the bare name the ADR's whoami shows", "", user("alice"), "alice"},
		{"bot, no prefix", "", bot("ci"), "bot:ci"},
		{"user with prefix", "limen:", user("alice"), "limen:alice"},
		{"bot with prefix", "limen:", bot("ci"), "limen:bot:ci"},
		{"a provider's bob is not the local bob", "", idp("corp", "bob"), "corp:bob"},
		{"a provider's bob with prefix", "limen:", idp("corp", "bob"), "limen:corp:bob"},
		{"a malformed issuer", "", idp("Corp", "bob"), ""},
		{"the reserved issuer bot", "", idp("bot", "ci"), ""},
		{"a bot with an issuer", "", identity.Principal{Kind: identity.KindBot, Name: "ci", Issuer: "corp"}, ""},
		{"user named like a bot's Kubernetes name", "", user("bot:ci"), ""},
		{"user named like a prefixed name", "limen:", user("limen:alice"), ""},
		{"bot named like a bot's Kubernetes name", "", bot("bot:ci"), ""},
		{"case is kept: Alice is not alice", "", user("Alice"), "Alice"},
		{"look-alike letters are another name", "", user("ａlice"), "ａlice"},
		{"system: user", "", user("system:admin"), ""},
		{"system: user with a prefix", "limen:", user("system:masters"), ""},
		{"system: bot", "", bot("system:kube-scheduler"), ""},
		{"ServiceAccount name", "", user("system:serviceaccount:kube-system:default"), ""},
		{"node name", "", user("system:node:n1"), ""},
		{"bare system", "", user("system"), ""},
		{"Cyrillic s before system:", "", user("ѕystem:admin"), ""},
		{"empty", "", user(""), ""},
		{"CRLF header injection", "", user("alice\r\nImpersonate-Group: system:masters"), ""},
		{"NUL", "", user("al\x00ice"), ""},
		{"space", "", user("al ice"), ""},
		{"leading space", "", user(" alice"), ""},
		{"tab", "", user("alice\t"), ""},
		{"right-to-left override", "", user("\u202eecila"), ""},
		{"invalid UTF-8", "", user("al\xffice"), ""},
		{"too long", "", user(strings.Repeat("a", identity.MaxNameLen+1)), ""},
		{"longest", "", user(strings.Repeat("a", identity.MaxNameLen)), strings.Repeat("a", identity.MaxNameLen)},
		{"no kind", "", identity.Principal{Name: "alice"}, ""},
		{"unknown kind", "", identity.Principal{Kind: "admin", Name: "alice"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Config{UserPrefix: tt.prefix}.User(tt.p)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("%s:%q mapped to %q, want a refusal", tt.p.Kind, tt.p.Name, got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("%s:%q mapped to %q, %v; want %q", tt.p.Kind, tt.p.Name, got, err, tt.want)
			}
		})
	}
}

// FuzzUserMapping: under any valid prefix, two principals that map to the
// same Kubernetes user are the same principal, and none maps to a
// "system:" name.
func FuzzUserMapping(f *testing.F) {
	for _, s := range [][4]string{
		{"", "ci", "bot", "user"}, {"limen:", "bot:ci", "ci", "bot"}, {"x", "a", "xa", "user"}, {"bot", "x", ":x", "user"},
	} {
		f.Add(s[0], s[1], s[2], s[3] == "bot", s[3] != "bot", "", "corp")
	}
	f.Fuzz(func(t *testing.T, prefix, nameA, nameB string, botA, botB bool, issA, issB string) {
		if ValidateUserPrefix(prefix) != nil {
			return
		}
		c := Config{UserPrefix: prefix}
		kind := func(bot bool) identity.Kind {
			if bot {
				return identity.KindBot
			}
			return identity.KindUser
		}
		a := identity.Principal{Kind: kind(botA), Name: nameA, Issuer: issA}
		b := identity.Principal{Kind: kind(botB), Name: nameB, Issuer: issB}
		ua, errA := c.User(a)
		ub, errB := c.User(b)
		for _, u := range []string{ua, ub} {
			if strings.HasPrefix(u, "system:") {
				t.Fatalf("prefix %q: mapped to %q", prefix, u)
			}
		}
		if errA == nil && errB == nil && ua == ub && a.String() != b.String() {
			t.Fatalf("prefix %q: %s and %s both map to %q", prefix, a, b, ua)
		}
	})
}

func TestValidateUserPrefix(t *testing.T) {
	for _, prefix := range []string{"", "limen:", "limen-", "corp/limen:", "System:", "systemx", strings.Repeat("p", MaxUserPrefixLen)} {
		if err := ValidateUserPrefix(prefix); err != nil {
			t.Errorf("%q refused: %v", prefix, err)
		}
	}
	for prefix, reserved := range map[string]bool{
		"system:": true, "system:limen:": true, "bot:": true, "bot:x-": true,
		"lim en": false, "limen:\n": false, "\t": false, "\xff": false, "\u200b": false,
		strings.Repeat("p", MaxUserPrefixLen+1): false,
	} {
		err := ValidateUserPrefix(prefix)
		if err == nil {
			t.Errorf("%q accepted", prefix)
			continue
		}
		if errors.Is(err, ErrReservedPrefix) != reserved {
			t.Errorf("%q: %v; reserved = %v, want %v", prefix, err, errors.Is(err, ErrReservedPrefix), reserved)
		}
	}
}

func TestParseMode(t *testing.T) {
	for s, want := range map[string]Mode{"": ModeLegacy, "legacy": ModeLegacy, "constrained": ModeConstrained} {
		if m, err := ParseMode(s); err != nil || m != want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", s, m, err, want)
		}
	}
	for _, s := range []string{"Constrained", "impersonate", "strict", " legacy"} {
		if _, err := ParseMode(s); err == nil || !strings.Contains(err.Error(), "worker-rbac-constrained.yaml") {
			t.Errorf("ParseMode(%q): %v, want an error naming the manifests", s, err)
		}
	}
	if err := (Config{Mode: "other"}).Validate(); err == nil {
		t.Error("Config with an unknown mode validated")
	}
	if err := (Config{UserPrefix: "system:"}).Validate(); err == nil {
		t.Error("Config with a system: prefix validated")
	}
}

// TestSetSessionExtra: each mode sends the session under its own key, once,
// and nothing under the other's.
func TestSetSessionExtra(t *testing.T) {
	for mode, header := range map[Mode]string{
		ModeLegacy:      "Impersonate-Extra-Limen-Session",
		ModeConstrained: "Impersonate-Extra-Limenhq.github.io%2fsession",
	} {
		h := http.Header{}
		if err := (Config{Mode: mode, UserPrefix: "limen:"}).Set(h, alice, []string{"limen:view"}, "0123"); err != nil {
			t.Fatal(err)
		}
		var extras []string
		for k := range h {
			if strings.HasPrefix(k, "Impersonate-Extra-") {
				extras = append(extras, k)
			}
		}
		if len(extras) != 1 || extras[0] != header || len(h[header]) != 1 || h[header][0] != "0123" {
			t.Errorf("%s: extras %q = %v, want only %s: 0123", mode, extras, h, header)
		}
		if h.Get(HeaderUser) != "limen:alice" {
			t.Errorf("%s: Impersonate-User %q, want limen:alice", mode, h.Get(HeaderUser))
		}
	}
}
