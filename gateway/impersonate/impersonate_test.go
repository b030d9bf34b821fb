package impersonate

import (
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/identity"
)

var alice = identity.Principal{Kind: identity.KindUser, Name: "alice"}

func TestStripIdentity(t *testing.T) {
	h := http.Header{
		"Authorization":                   {"Bearer stolen"},
		"authorization":                   {"Basic x"},
		"Impersonate-User":                {"admin"},
		"Impersonate-Group":               {"system:masters", "limen:edit"},
		"impersonate-group":               {"system:masters"},
		"IMPERSONATE-UID":                 {"0"},
		"Impersonate-Extra-Limen-Session": {"forged"},
		"Impersonate-Extra-Scopes":        {"x"},
		"X-Remote-User":                   {"admin"},
		"x-remote-group":                  {"system:masters"},
		"X-Remote-Extra-Foo":              {"bar"},
		"X-Limen-Grant":                   {"forged"},
		"x-LIMEN-anything":                {"forged"},
		"X-Forwarded-For":                 {"10.0.0.1", "10.0.0.2"},
		"x-forwarded-host":                {"evil"},
		"Forwarded":                       {"for=10.0.0.1"},
		"X-REAL-IP":                       {"10.0.0.1"},
		"Accept":                          {"application/json"},
		"Content-Type":                    {"application/json"},
		"X-Request-Id":                    {"42"},
		"Impersonate":                     {"not a prefix match"},
		"X-Remote":                        {"not a prefix match"},
	}
	removed := StripIdentity(h)
	if len(removed) != 17 {
		t.Errorf("removed %d headers %q, want 17", len(removed), removed)
	}
	var left []string
	for k := range h {
		left = append(left, k)
	}
	slices.Sort(left)
	want := []string{"Accept", "Content-Type", "Impersonate", "X-Remote", "X-Request-Id"}
	if !slices.Equal(left, want) {
		t.Fatalf("left %q, want %q", left, want)
	}
}

func TestIsIdentityHeader(t *testing.T) {
	for name, want := range map[string]bool{
		"Authorization": true, "AUTHORIZATION": true, "Authorization2": false,
		"Proxy-Authorization": false, "Impersonate-": true, "impersonate-user": true,
		"X-Remote-": true, "X-Limen-": true, "X-Limenx": false, "": false, "Imp": false,
		"Forwarded": true, "FORWARDED": true, "Forwarded-For": false, "X-Forwarded-For": true,
		"x-forwarded-proto": true, "X-Forwarded": false, "X-Real-Ip": true, "X-Real-IP-2": false,
	} {
		if got := IsIdentityHeader(name); got != want {
			t.Errorf("IsIdentityHeader(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestSet(t *testing.T) {
	h := http.Header{
		"Accept":            {"*/*"},
		"impersonate-user":  {"admin"},
		"Impersonate-Group": {"system:masters"},
		"Authorization":     {"Bearer x"},
	}
	if err := (Config{}).Set(h, alice, []string{"limen:edit", "limen:view"}, "0123"); err != nil {
		t.Fatal(err)
	}
	want := http.Header{
		"Accept":                          {"*/*"},
		"Impersonate-User":                {"alice"},
		"Impersonate-Group":               {"limen:edit", "limen:view"},
		"Impersonate-Extra-Limen-Session": {"0123"},
	}
	if len(h) != len(want) {
		t.Fatalf("headers %v, want %v", h, want)
	}
	for k, v := range want {
		if !slices.Equal(h[k], v) {
			t.Errorf("%s = %q, want %q", k, h[k], v)
		}
	}
	// The wire form: one header line per group.
	var sb strings.Builder
	_ = h.Write(&sb)
	if n := strings.Count(sb.String(), "Impersonate-Group: "); n != 2 {
		t.Errorf("%d Impersonate-Group lines on the wire, want 2:\n%s", n, sb.String())
	}
}

func TestImpersonateRefuses(t *testing.T) {
	user := func(name string) identity.Principal { return identity.Principal{Kind: identity.KindUser, Name: name} }
	tests := []struct {
		name, session string
		p             identity.Principal
		groups        []string
		sentinel      error
	}{
		{"no user", "s", user(""), []string{"g"}, nil},
		{"system user", "s", user("system:admin"), []string{"g"}, nil},
		{"no kind", "s", identity.Principal{Name: "alice"}, []string{"g"}, nil},
		{"no groups", "s", alice, nil, nil},
		{"system group", "s", alice, []string{"limen:view", "system:masters"}, ErrSystemGroup},
		{"empty group", "s", alice, []string{""}, nil},
		{"CRLF in group", "s", alice, []string{"a\r\nImpersonate-Group: system:masters"}, nil},
		{"no session", "", alice, []string{"g"}, nil},
		{"NUL in user", "s", user("al\x00ice"), []string{"g"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{"Impersonate-User": {"admin"}, "Accept": {"*/*"}}
			err := (Config{}).Set(h, tt.p, tt.groups, tt.session)
			if err == nil {
				t.Fatal("accepted")
			}
			if tt.sentinel != nil && !errors.Is(err, tt.sentinel) {
				t.Errorf("error %v, want %v", err, tt.sentinel)
			}
			if len(h) != 1 || h.Get("Accept") == "" {
				t.Errorf("after a refusal headers are %v, want only Accept", h)
			}
		})
	}
}

func TestSetForwardedFor(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.7:51234":        "192.0.2.7",
		"[2001:db8::1]:443":      "2001:db8::1",
		"[::ffff:192.0.2.9]:1":   "192.0.2.9",
		"192.0.2.8":              "192.0.2.8",
		"":                       "",
		"host.example:80":        "",
		"192.0.2.7:1, 10.0.0.1":  "",
		"192.0.2.7\r\nX-Evil: 1": "",
	} {
		h := http.Header{}
		SetForwardedFor(h, addr)
		if got := h.Get(HeaderForwardedFor); got != want || len(h.Values(HeaderForwardedFor)) > 1 {
			t.Errorf("SetForwardedFor(%q) = %q, want %q", addr, h.Values(HeaderForwardedFor), want)
		}
	}
}

// FuzzSetForwardedFor: whatever the grant's address, X-Forwarded-For is
// absent or one IP address, never anything that could split a header.
func FuzzSetForwardedFor(f *testing.F) {
	for _, s := range []string{"192.0.2.7:51234", "[2001:db8::1]:443", "host:80", "1.2.3.4\r\nX: y", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		h := http.Header{}
		SetForwardedFor(h, addr)
		vs := h.Values(HeaderForwardedFor)
		if len(vs) == 0 {
			return
		}
		if len(vs) != 1 {
			t.Fatalf("%q: %d values", addr, len(vs))
		}
		if _, err := netip.ParseAddr(vs[0]); err != nil || strings.ContainsAny(vs[0], "\r\n ,") {
			t.Fatalf("%q: X-Forwarded-For %q is not one IP address", addr, vs[0])
		}
	})
}
