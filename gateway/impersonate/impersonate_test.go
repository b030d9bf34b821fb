package impersonate

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
)

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
		"Accept":                          {"application/json"},
		"Content-Type":                    {"application/json"},
		"X-Request-Id":                    {"42"},
		"Impersonate":                     {"not a prefix match"},
		"X-Remote":                        {"not a prefix match"},
	}
	removed := StripIdentity(h)
	if len(removed) != 13 {
		t.Errorf("removed %d headers %q, want 13", len(removed), removed)
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
	if err := Set(h, "alice", []string{"limen:edit", "limen:view"}, "0123"); err != nil {
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
	tests := []struct {
		name, user, session string
		groups              []string
		sentinel            error
	}{
		{"no user", "", "s", []string{"g"}, nil},
		{"system user", "system:admin", "s", []string{"g"}, ErrSystemGroup},
		{"no groups", "alice", "s", nil, nil},
		{"system group", "alice", "s", []string{"limen:view", "system:masters"}, ErrSystemGroup},
		{"empty group", "alice", "s", []string{""}, nil},
		{"CRLF in group", "alice", "s", []string{"a\r\nImpersonate-Group: system:masters"}, nil},
		{"no session", "alice", "", []string{"g"}, nil},
		{"NUL in user", "al\x00ice", "s", []string{"g"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{"Impersonate-User": {"admin"}, "Accept": {"*/*"}}
			err := Set(h, tt.user, tt.groups, tt.session)
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
