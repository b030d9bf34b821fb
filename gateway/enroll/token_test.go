package enroll

import (
	"strings"
	"testing"
)

var fp = "sha256:" + strings.Repeat("ab", 32)

func TestTokenRoundTrip(t *testing.T) {
	tok, err := NewToken(fp)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseToken(" " + tok.String() + "\n")
	if err != nil || got != tok {
		t.Fatalf("ParseToken(String()) = %+v, %v; want %+v", got, err, tok)
	}
	if strings.Contains(tok.String(), tok.ID()) {
		t.Fatal("token id leaks part of the token")
	}
}

func TestParseTokenHostile(t *testing.T) {
	tok, _ := NewToken(fp)
	s := tok.String()
	parts := strings.Split(s, ".")
	for name, in := range map[string]string{
		"empty":          "",
		"version 2":      "lj2." + parts[1] + "." + parts[2],
		"missing part":   parts[0] + "." + parts[1],
		"extra part":     s + ".x",
		"short secret":   parts[0] + "." + parts[1][:20] + "." + parts[2],
		"padded secret":  parts[0] + "." + parts[1] + "=." + parts[2],
		"std base64":     parts[0] + "." + strings.ReplaceAll(parts[1], "-", "+") + "+." + parts[2],
		"short fp":       parts[0] + "." + parts[1] + "." + parts[2][:62],
		"upper fp":       parts[0] + "." + parts[1] + "." + strings.ToUpper(parts[2]),
		"prefixed fp":    parts[0] + "." + parts[1] + ".sha256:" + parts[2],
		"non-hex fp":     parts[0] + "." + parts[1] + "." + strings.Repeat("zz", 32),
		"huge":           strings.Repeat("a", 10000),
		"control in fp":  parts[0] + "." + parts[1] + "." + parts[2][:63] + "\x00",
		"newline inside": parts[0] + ".\n" + parts[1] + "." + parts[2],
	} {
		if tt, err := ParseToken(in); err == nil {
			t.Errorf("%s: ParseToken(%q) = %+v, want error", name, in, tt)
		}
	}
}

func FuzzParseToken(f *testing.F) {
	tok, _ := NewToken(fp)
	f.Add(tok.String())
	f.Add("lj1..")
	f.Fuzz(func(t *testing.T, s string) {
		tt, err := ParseToken(s)
		if err != nil {
			return
		}
		again, err := ParseToken(tt.String())
		if err != nil || again != tt {
			t.Fatalf("re-parse of %q: %+v, %v", tt.String(), again, err)
		}
	})
}
