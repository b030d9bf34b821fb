package bots

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

func open(t *testing.T) (*Store, *time.Time) {
	s, now, _ := openAt(t)
	return s, now
}

func openAt(t *testing.T) (*Store, *time.Time, string) {
	t.Helper()
	now := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	path := filepath.Join(t.TempDir(), FileName)
	s, err := Open(path, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, &now, path
}

var admin = identity.Principal{Kind: identity.KindUser, Name: "root"}

func TestSecretLifecycle(t *testing.T) {
	ctx := context.Background()
	s, now, path := openAt(t)
	if err := s.Add(ctx, "ci", map[string][]string{"team": {"web"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(ctx, "ci", nil); !errors.Is(err, ErrExists) {
		t.Fatalf("second add: %v", err)
	}
	secret, info, err := s.CreateSecret(ctx, "ci", time.Hour, 2, admin)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, secretPrefix) || info.UsesLeft != 2 {
		t.Fatalf("secret %q info %+v", secret, info)
	}
	// The store holds no copy of the secret.
	_, key, _ := strings.Cut(secret, ".")
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM secrets WHERE instr(id || hash || by || bot, ?) > 0`, key).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the secret is stored in clear (%d rows, %v)", n, err)
	}
	if _, _, err := s.Redeem(ctx, "other", secret); !errors.Is(err, ErrBadSecret) {
		t.Fatalf("another bot's name: %v", err)
	}
	if _, _, err := s.Redeem(ctx, "ci", secret+"x"); !errors.Is(err, ErrBadSecret) {
		t.Fatalf("edited secret: %v", err)
	}
	b, got, err := s.Redeem(ctx, "ci", secret+"\n")
	if err != nil || b.Traits["team"][0] != "web" || got.UsesLeft != 1 {
		t.Fatalf("redeem: %+v %+v %v", b, got, err)
	}
	if _, _, err := s.Redeem(ctx, "ci", secret); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Redeem(ctx, "ci", secret); !errors.Is(err, ErrBadSecret) {
		t.Fatalf("third use of a two-use secret: %v", err)
	}
	unlimited, _, err := s.CreateSecret(ctx, "ci", time.Hour, 0, admin)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, _, err := s.Redeem(ctx, "ci", unlimited); err != nil {
			t.Fatal(err)
		}
	}
	*now = now.Add(time.Hour)
	if _, _, err := s.Redeem(ctx, "ci", unlimited); !errors.Is(err, ErrBadSecret) {
		t.Fatalf("expired secret: %v", err)
	}
}

func TestRemoveRevokesSecrets(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t)
	if err := s.Add(ctx, "ci", nil); err != nil {
		t.Fatal(err)
	}
	secret, _, err := s.CreateSecret(ctx, "ci", time.Hour, 0, admin)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "ci"); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(ctx, "ci", nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Redeem(ctx, "ci", secret); !errors.Is(err, ErrBadSecret) {
		t.Fatalf("a removed bot's secret works for its namesake: %v", err)
	}
	if err := s.Remove(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("remove unknown: %v", err)
	}
}

func TestValidation(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t)
	for _, name := range []string{"", "a:b", "system-x"} {
		if err := s.Add(ctx, name, nil); err == nil {
			t.Errorf("added bot %q", name)
		}
	}
	if _, _, err := s.CreateSecret(ctx, "nobody", time.Hour, 0, admin); !errors.Is(err, ErrNotFound) {
		t.Fatalf("secret for unknown bot: %v", err)
	}
	s.Add(ctx, "ci", nil)
	for _, ttl := range []time.Duration{0, -time.Hour, MaxTTL + time.Hour} {
		if _, _, err := s.CreateSecret(ctx, "ci", ttl, 0, admin); err == nil {
			t.Errorf("ttl %s accepted", ttl)
		}
	}
}
