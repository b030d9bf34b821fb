package users

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

func openStore(t *testing.T, opts Options) *Store {
	t.Helper()
	if opts.Cost == 0 {
		opts.Cost = bcrypt.MinCost
	}
	s, err := Open(filepath.Join(t.TempDir(), FileName), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestUserLifecycle(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, Options{})
	traits := map[string][]string{"groups": {"admins"}}
	if err := s.Add(ctx, "alice", "correct horse", traits); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(ctx, "alice", "another one", nil); !errors.Is(err, ErrExists) {
		t.Fatalf("second add: %v, want ErrExists", err)
	}
	u, err := s.Authenticate(ctx, "alice", "correct horse", "10.0.0.1")
	if err != nil || u.Name != "alice" || !slices.Equal(u.Traits["groups"], []string{"admins"}) {
		t.Fatalf("Authenticate = %+v, %v", u, err)
	}
	if err := s.SetPassword(ctx, "alice", "battery staple"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, "alice", "correct horse", "10.0.0.1"); !errors.Is(err, ErrBadCredentials) {
		t.Fatalf("old password after passwd: %v", err)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "alice" {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if err := s.Remove(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "alice"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second remove: %v", err)
	}
	if err := s.SetPassword(ctx, "bob", "whatever123"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("passwd of unknown user: %v", err)
	}
}

func TestAddRejectsHostileInput(t *testing.T) {
	s := openStore(t, Options{})
	for _, tt := range []struct {
		name, pw string
		traits   map[string][]string
	}{
		{"", "password1", nil},
		{"system:admin", "password1", nil},
		{"a b", "password1", nil},
		{"bob\n", "password1", nil},
		{"bob", "short", nil},
		{"bob", strings.Repeat("x", 73), nil},
		{"bob", "password1", map[string][]string{"groups": {"a\x00"}}},
		{"bob", "password1", map[string][]string{"": {"a"}}},
	} {
		if err := s.Add(context.Background(), tt.name, tt.pw, tt.traits); err == nil {
			t.Errorf("Add(%q, %q, %v) accepted", tt.name, tt.pw, tt.traits)
		}
	}
}

func TestUnknownUserAndWrongPasswordLookAlike(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, Options{Cost: 8, Limits: Limits{UserBurst: 100, UserEvery: time.Millisecond, AddrBurst: 100, AddrEvery: time.Millisecond}})
	if err := s.Add(ctx, "alice", "correct horse", nil); err != nil {
		t.Fatal(err)
	}
	measure := func(name string) (time.Duration, error) {
		var best time.Duration
		var last error
		for i := 0; i < 5; i++ {
			start := time.Now()
			_, last = s.Authenticate(ctx, name, "wrong password", "10.0.0.2")
			if d := time.Since(start); best == 0 || d < best {
				best = d
			}
		}
		return best, last
	}
	known, errKnown := measure("alice")
	unknown, errUnknown := measure("mallory")
	if errKnown == nil || errKnown.Error() != errUnknown.Error() {
		t.Fatalf("messages differ: %v vs %v", errKnown, errUnknown)
	}
	// Without the dummy comparison an unknown user returns in microseconds.
	if unknown < known/3 {
		t.Fatalf("unknown user took %s, wrong password %s: timing reveals which names exist", unknown, known)
	}
}

func TestRateLimits(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, Options{Limits: Limits{UserBurst: 3, UserEvery: time.Hour, AddrBurst: 5, AddrEvery: time.Hour}})
	s.Add(ctx, "alice", "correct horse", nil)
	for i := 0; i < 3; i++ {
		if _, err := s.Authenticate(ctx, "alice", "nope-nope", "10.0.0.1"); !errors.Is(err, ErrBadCredentials) {
			t.Fatalf("attempt %d: %v", i, err)
		}
	}
	// The name is exhausted, even from another address and with the right password.
	if _, err := s.Authenticate(ctx, "alice", "correct horse", "10.0.0.9"); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("4th attempt for alice: %v, want ErrRateLimited", err)
	}
	// Unknown names are limited the same way, so limiting reveals nothing.
	for i := 0; i < 3; i++ {
		s.Authenticate(ctx, "ghost", "nope-nope", "10.0.0.3")
	}
	if _, err := s.Authenticate(ctx, "ghost", "nope-nope", "10.0.0.4"); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("unknown name not limited: %v", err)
	}
	// An address spraying names is limited too.
	for i := 0; i < 5; i++ {
		s.Authenticate(ctx, "user"+string(rune('a'+i)), "nope-nope", "10.0.0.5")
	}
	if _, err := s.Authenticate(ctx, "fresh", "nope-nope", "10.0.0.5"); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("address not limited: %v", err)
	}
}

func TestStoreSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), FileName)
	a, err := Open(path, Options{Cost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	a.Add(ctx, "alice", "correct horse", nil)
	// A second handle, as `limen users add --local` beside a running proxy.
	b, err := Open(path, Options{Cost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Add(ctx, "bob", "correct horse", nil); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := a.Authenticate(ctx, "bob", "correct horse", "::1"); err != nil {
		t.Fatalf("user added by the second handle: %v", err)
	}
	a.Close()
}

// TestNameSprayCannotLockOutPasswordLogins: one address spraying 50,001
// fresh names is stopped by its own address limit before any name is
// tracked, so alice signs in from another address with her right password,
// and the limiter's tables stay small.
func TestNameSprayCannotLockOutPasswordLogins(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, Options{})
	if err := s.Add(ctx, "alice", "correct horse", nil); err != nil {
		t.Fatal(err)
	}
	for i := range 50001 {
		s.Authenticate(ctx, fmt.Sprintf("spray-%d", i), "nope-nope", "192.0.2.1")
	}
	if _, err := s.Authenticate(ctx, "alice", "correct horse", "198.51.100.7"); err != nil {
		t.Fatalf("alice from another address after the spray: %v, want success", err)
	}
	if n := s.limiter.size(); n > 2*DefaultLimits().AddrBurst {
		t.Fatalf("the limiter tracks %d keys after one address sprayed names; want at most %d (its burst and a few)", n, 2*DefaultLimits().AddrBurst)
	}
}
