package bots

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestReplayCache(t *testing.T) {
	now := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	c := NewReplayCache(3)
	if err := c.Use("ci\x00a", now.Add(5*time.Minute), now); err != nil {
		t.Fatal(err)
	}
	// The same id within the token's lifetime is refused; another
	// issuer's token with the same jti is another token.
	if err := c.Use("ci\x00a", now.Add(5*time.Minute), now.Add(4*time.Minute)); !errors.Is(err, ErrReplayed) {
		t.Fatalf("second use: %v, want ErrReplayed", err)
	}
	if err := c.Use("gl\x00a", now.Add(5*time.Minute), now); err != nil {
		t.Fatalf("another issuer's jti: %v", err)
	}
	if err := c.Use("ci\x00b", now.Add(time.Minute), now); err != nil {
		t.Fatal(err)
	}
	// Full of live ids: refused, and nothing remembered is forgotten.
	if err := c.Use("ci\x00c", now.Add(5*time.Minute), now); !errors.Is(err, ErrReplayFull) {
		t.Fatalf("fourth id in a cache of three: %v, want ErrReplayFull", err)
	}
	if err := c.Use("ci\x00a", now.Add(5*time.Minute), now); !errors.Is(err, ErrReplayed) {
		t.Fatalf("a full cache forgot a live id: %v", err)
	}
	// Once b expires, its room is free again.
	later := now.Add(2 * time.Minute)
	if err := c.Use("ci\x00c", now.Add(5*time.Minute), later); err != nil {
		t.Fatalf("after b expired: %v", err)
	}
	// After its expiry a token is the verifier's to refuse.
	if err := c.Use("ci\x00a", now.Add(5*time.Minute), now.Add(6*time.Minute)); err != nil {
		t.Fatalf("after expiry: %v", err)
	}
}

// TestReplayCacheBounded: however many tokens log in, memory stays within
// the bound, and expired ids are forgotten.
func TestReplayCacheBounded(t *testing.T) {
	now := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	c := NewReplayCache(1000)
	for i := range 100_000 {
		at := now.Add(time.Duration(i) * time.Second)
		err := c.Use(fmt.Sprint("ci\x00", i), at.Add(10*time.Minute), at)
		if err != nil && !errors.Is(err, ErrReplayFull) {
			t.Fatal(err)
		}
		if c.Len() > 1000 || len(c.exp) > 1000 {
			t.Fatalf("after %d ids: %d remembered, %d in the heap", i, c.Len(), len(c.exp))
		}
	}
	if n := c.Len(); n != 600 { // ten minutes of one a second
		t.Fatalf("%d ids remembered, want the 600 still live", n)
	}
}

func TestCIKinds(t *testing.T) {
	for url, want := range map[string]CIKind{
		"https://token.actions.githubusercontent.com":   KindGitHub,
		"https://token.actions.githubusercontent.com/":  KindGitHub,
		"https://gitlab.com":                            KindGitLab,
		"https://gitlab.example.com":                    "",
		"http://token.actions.githubusercontent.com":    "",
		"https://token.actions.githubusercontent.com/x": "",
		"http://127.0.0.1:8080":                         "",
	} {
		if k, ok := KindOfIssuer(url); k != want || ok != (want != "") {
			t.Errorf("KindOfIssuer(%q) = %q, %v; want %q", url, k, ok, want)
		}
	}
	for _, s := range []string{"github", "gitlab", "generic"} {
		if _, err := ParseCIKind(s); err != nil {
			t.Error(err)
		}
	}
	if _, err := ParseCIKind("jenkins"); err == nil {
		t.Error("ParseCIKind(jenkins) accepted")
	}
}
