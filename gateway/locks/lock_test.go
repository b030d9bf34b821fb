package locks

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func testLock(name string) Lock {
	return Lock{
		Target:    Target{Kind: identity.KindUser, Name: name},
		Reason:    "incident 42",
		CreatedBy: "user:admin",
		CreatedAt: t0,
	}
}

func TestLockValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Lock)
		ok     bool
	}{
		{"valid", func(*Lock) {}, true},
		{"bot", func(l *Lock) { l.Target.Kind = identity.KindBot }, true},
		{"expiring", func(l *Lock) { l.Expires = t0.Add(time.Hour) }, true},
		{"bad kind", func(l *Lock) { l.Target.Kind = "group" }, false},
		{"empty name", func(l *Lock) { l.Target.Name = "" }, false},
		{"system name", func(l *Lock) { l.Target.Name = "system:admin" }, false},
		{"no reason", func(l *Lock) { l.Reason = " " }, false},
		{"long reason", func(l *Lock) { l.Reason = strings.Repeat("x", MaxReasonLen+1) }, false},
		{"control in reason", func(l *Lock) { l.Reason = "a\nb" }, false},
		{"no creator", func(l *Lock) { l.CreatedBy = "" }, false},
		{"no creation time", func(l *Lock) { l.CreatedAt = time.Time{} }, false},
		{"expires before creation", func(l *Lock) { l.Expires = t0.Add(-time.Second) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := testLock("alice")
			tt.change(&l)
			if err := l.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestParseTarget(t *testing.T) {
	tests := []struct {
		in   string
		want Target
		ok   bool
	}{
		{"alice", Target{identity.KindUser, "alice"}, true},
		{"user:alice", Target{identity.KindUser, "alice"}, true},
		{"bot:ci", Target{identity.KindBot, "ci"}, true},
		{"group:x", Target{}, false},
		{"", Target{}, false},
		{"user:", Target{}, false},
		{"bot:a:b", Target{}, false},
		{"user:corp:alice", Target{identity.KindUser, "corp:alice"}, true},
		{"user:Corp:alice", Target{}, false},
		{"user::alice", Target{}, false},
	}
	for _, tt := range tests {
		got, err := ParseTarget(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseTarget(%q) = %v, %v; want %v ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// A lock on the local bob is not a lock on identity provider corp's bob,
// and the reverse: two sources never share a name.
func TestLockProvenance(t *testing.T) {
	local := identity.Principal{Kind: identity.KindUser, Name: "bob"}
	corp := identity.Principal{Kind: identity.KindUser, Name: "bob", Issuer: "corp"}
	for _, tc := range []struct{ locked, other identity.Principal }{{local, corp}, {corp, local}} {
		s := NewSet()
		l := testLock("x")
		l.Target = TargetOf(tc.locked)
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
		s.Replace([]Lock{l})
		if _, ok := s.Locked(tc.locked, t0); !ok {
			t.Errorf("a lock on %s does not lock it", tc.locked)
		}
		if _, ok := s.Locked(tc.other, t0); ok {
			t.Errorf("a lock on %s locks %s", tc.locked, tc.other)
		}
		back, err := ParseTarget(tc.locked.String())
		if err != nil || back != l.Target {
			t.Errorf("ParseTarget(%q) = %v, %v; want %v", tc.locked.String(), back, err, l.Target)
		}
	}
}

func TestLockedErrorNamesLockAndReason(t *testing.T) {
	l := testLock("alice")
	l.Expires = t0.Add(time.Hour)
	var err error = &LockedError{Lock: l}
	if !errors.Is(err, ErrLocked) {
		t.Fatal("errors.Is(LockedError, ErrLocked) = false")
	}
	want := "user alice is locked by user:admin: incident 42 (until 2030-01-02T04:04:05Z)"
	if err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err.Error(), want)
	}
	var le *LockedError
	if !errors.As(err, &le) || le.Lock != l {
		t.Fatal("errors.As did not recover the lock")
	}
}

func TestActive(t *testing.T) {
	l := testLock("a")
	if !l.Active(t0.Add(100 * 365 * 24 * time.Hour)) {
		t.Fatal("lock without expiry lapsed")
	}
	l.Expires = t0.Add(time.Minute)
	if !l.Active(t0.Add(59*time.Second)) || l.Active(t0.Add(time.Minute)) {
		t.Fatal("expiry boundary wrong: active before, inactive at Expires")
	}
}
