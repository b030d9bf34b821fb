// Package bots keeps Limen's bots (CI jobs and other automation) through
// gateway/store (an SQLite file in the proxy's data directory, or the
// shared PostgreSQL database): each bot's traits, and the
// join secrets a bot logs in with. A secret is shown once and stored only
// as its SHA-256 (it is 32 random bytes, so a slow hash adds nothing); it
// has an expiry and optionally a number of uses, and each login spends one.
package bots

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/store"
	"github.com/limenhq/limen/gateway/store/sqlite"
)

// FileName is the store's file inside the data directory.
const FileName = sqlite.BotsFile

// Path is the store's path in dataDir.
func Path(dataDir string) string { return filepath.Join(dataDir, FileName) }

// Errors callers map to responses.
var (
	ErrNotFound = errors.New("no such bot")
	ErrExists   = errors.New("a bot of that name exists already")
	// ErrBadSecret is the one answer for an unknown bot, an unknown, wrong,
	// expired or spent secret, so that none can be told from another.
	ErrBadSecret = errors.New("invalid bot name or join secret (unknown, expired or used up): ask an admin for limen bots token")
)

// MaxTTL bounds a join secret's life.
const MaxTTL = 90 * 24 * time.Hour

// Bot is a bot as listed.
type Bot struct {
	Name    string              `json:"name"`
	Traits  map[string][]string `json:"traits,omitempty"`
	Created time.Time           `json:"created"`
}

// SecretInfo describes a join secret without the secret.
type SecretInfo struct {
	ID      string    `json:"id"`
	Bot     string    `json:"bot"`
	Expires time.Time `json:"expires"`
	// UsesLeft is the number of logins left; -1 is unlimited until expiry.
	UsesLeft int    `json:"uses_left"`
	By       string `json:"created_by"`
}

// Store is the bot directory over a store.Bots driver; safe for
// concurrent use.
type Store struct {
	db  store.Bots
	now func() time.Time
}

// Open opens (creating if needed) the SQLite store at path. now may be nil.
func Open(path string, now func() time.Time) (*Store, error) {
	db, err := sqlite.OpenBots(context.Background(), path)
	if err != nil {
		return nil, err
	}
	return New(db, now), nil
}

// New builds the directory over db; Close closes db. now may be nil.
func New(db store.Bots, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{db: db, now: now}
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Add creates a bot.
func (s *Store) Add(ctx context.Context, name string, traits map[string][]string) error {
	if err := (identity.Principal{Kind: identity.KindBot, Name: name, Traits: traits}).Validate(); err != nil {
		return err
	}
	tj, err := json.Marshal(traits)
	if err != nil {
		return err
	}
	err = s.db.Insert(ctx, store.BotRecord{Name: name, Traits: string(tj), Created: s.now().Unix()})
	if errors.Is(err, store.ErrExists) {
		return fmt.Errorf("bot %s: %w", name, ErrExists)
	}
	return err
}

// Remove deletes a bot and all its secrets.
func (s *Store) Remove(ctx context.Context, name string) error {
	err := s.db.Delete(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("bot %s: %w", name, ErrNotFound)
	}
	return err
}

// Get returns one bot.
func (s *Store) Get(ctx context.Context, name string) (Bot, error) {
	r, err := s.db.Get(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return Bot{}, fmt.Errorf("bot %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return Bot{}, err
	}
	return fromRecord(r)
}

func fromRecord(r store.BotRecord) (Bot, error) {
	b := Bot{Name: r.Name, Created: time.Unix(r.Created, 0).UTC()}
	return b, json.Unmarshal([]byte(r.Traits), &b.Traits)
}

// List returns every bot, by name.
func (s *Store) List(ctx context.Context) ([]Bot, error) {
	recs, err := s.db.List(ctx)
	if err != nil {
		return nil, err
	}
	out := []Bot{}
	for _, r := range recs {
		b, err := fromRecord(r)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// secretPrefix marks a Limen bot join secret, so that secret scanners and
// people can recognise one.
const secretPrefix = "limen-bot_"

// CreateSecret makes a join secret for bot that lives ttl and allows uses
// logins (0: unlimited until expiry). The secret is returned once.
func (s *Store) CreateSecret(ctx context.Context, bot string, ttl time.Duration, uses int, by identity.Principal) (string, SecretInfo, error) {
	switch {
	case ttl <= 0 || ttl > MaxTTL:
		return "", SecretInfo{}, fmt.Errorf("ttl %s: must be positive and at most %s", ttl, MaxTTL)
	case uses < 0:
		return "", SecretInfo{}, fmt.Errorf("uses %d: must be 0 (unlimited) or more", uses)
	}
	if _, err := s.Get(ctx, bot); err != nil {
		return "", SecretInfo{}, err
	}
	idb, secret := make([]byte, 8), make([]byte, 32)
	rand.Read(idb)
	rand.Read(secret)
	info := SecretInfo{ID: hex.EncodeToString(idb), Bot: bot, Expires: s.now().Add(ttl).UTC().Truncate(time.Second),
		UsesLeft: uses, By: by.String()}
	if uses == 0 {
		info.UsesLeft = -1
	}
	sum := sha256.Sum256(secret)
	err := s.db.InsertSecret(ctx, store.SecretRecord{ID: info.ID, Bot: bot, Hash: sum[:], Expires: info.Expires.Unix(),
		UsesLeft: info.UsesLeft, By: info.By})
	if errors.Is(err, store.ErrNotFound) {
		return "", SecretInfo{}, fmt.Errorf("bot %s: %w", bot, ErrNotFound)
	}
	if err != nil {
		return "", SecretInfo{}, err
	}
	return secretPrefix + info.ID + "." + base64.RawURLEncoding.EncodeToString(secret), info, nil
}

// Redeem checks a join secret for bot and spends one use. It returns the
// bot and the secret's expiry, which bounds the certificate issued for it.
func (s *Store) Redeem(ctx context.Context, bot, secret string) (Bot, SecretInfo, error) {
	id, raw, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(secret), secretPrefix), ".")
	key, err := base64.RawURLEncoding.DecodeString(raw)
	if !ok || err != nil || len(key) != 32 {
		return Bot{}, SecretInfo{}, ErrBadSecret
	}
	sum := sha256.Sum256(key)
	var info SecretInfo
	err = s.db.UpdateSecret(ctx, id, func(r *store.SecretRecord) error {
		info = SecretInfo{ID: r.ID, Bot: r.Bot, Expires: time.Unix(r.Expires, 0).UTC(), UsesLeft: r.UsesLeft, By: r.By}
		if subtle.ConstantTimeCompare(r.Hash, sum[:]) != 1 || info.Bot != bot || !s.now().Before(info.Expires) || info.UsesLeft == 0 {
			return ErrBadSecret
		}
		if r.UsesLeft > 0 {
			r.UsesLeft--
			info.UsesLeft = r.UsesLeft
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return Bot{}, SecretInfo{}, ErrBadSecret
	}
	if err != nil {
		return Bot{}, SecretInfo{}, err
	}
	b, err := s.Get(ctx, bot)
	if errors.Is(err, ErrNotFound) {
		return Bot{}, SecretInfo{}, ErrBadSecret
	}
	return b, info, err
}
