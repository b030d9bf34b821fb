package locks

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

// TestStaleViewRefusesInStrictMode: a guarded set trusts its view for
// StaleAfter after the last confirmation. Past it, strict mode refuses
// everyone, locked or not, with a *StaleError (503); best-effort keeps
// answering from the last view; a confirmation ends the refusal.
func TestStaleViewRefusesInStrictMode(t *testing.T) {
	bob := identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "bob"}
	for _, mode := range []Mode{ModeStrict, ModeBestEffort} {
		t.Run(string(mode), func(t *testing.T) {
			now := time.Unix(1_000_000, 0)
			s := NewSet()
			s.now = func() time.Time { return now }
			s.Guard(30*time.Second, mode)
			if err := s.Check(bob, now.Add(30*time.Second)); err != nil {
				t.Fatalf("at the bound: %v", err)
			}
			late := now.Add(31 * time.Second)
			if s.Stale(late) == nil {
				t.Fatal("not stale 31s after the last confirmation with a 30s bound")
			}
			err := s.Check(bob, late)
			switch mode {
			case ModeStrict:
				var se *StaleError
				if !errors.As(err, &se) || HTTPStatus(err) != http.StatusServiceUnavailable ||
					!strings.Contains(err.Error(), "lock-stale-after is 30s") {
					t.Fatalf("strict, stale: %v, want a StaleError answered 503 naming lock-stale-after", err)
				}
			case ModeBestEffort:
				if err != nil {
					t.Fatalf("best-effort, stale: %v, want the last view's answer", err)
				}
			}
			s.Confirmed(late)
			if err := s.Check(bob, late.Add(time.Second)); err != nil {
				t.Fatalf("after a confirmation: %v", err)
			}
		})
	}
}

// TestUnguardedSetNeverStale: the worker's set is never guarded.
func TestUnguardedSetNeverStale(t *testing.T) {
	s := NewSet()
	if err := s.Stale(time.Now().Add(24 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	if HTTPStatus(&LockedError{}) != http.StatusForbidden {
		t.Fatal("a lock is not answered 403")
	}
}

func TestParseMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Mode
	}{
		{"strict", ModeStrict}, {"best-effort", ModeBestEffort},
		{"", ""}, {"best_effort", ""}, {"STRICT", ""}, {"strict ", ""}, {"strict\x00", ""}, {"off", ""},
	} {
		got, err := ParseMode(tc.in)
		if got != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
		if err != nil && !strings.Contains(err.Error(), "best-effort") {
			t.Errorf("ParseMode(%q): %v does not name the modes", tc.in, err)
		}
	}
}

func FuzzParseMode(f *testing.F) {
	for _, s := range []string{"strict", "best-effort", "", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMode(s)
		if err == nil && string(m) != s {
			t.Fatalf("ParseMode(%q) = %q", s, m)
		}
		if err == nil && m != ModeStrict && m != ModeBestEffort {
			t.Fatalf("ParseMode(%q) accepted %q", s, m)
		}
	})
}
