// Package bots keeps Limen's bots (CI jobs and other automation) in an
// SQLite file in the proxy's data directory: each bot's traits, and the
// join secrets a bot logs in with. A secret is shown once and stored only
// as its SHA-256 (it is 32 random bytes, so a slow hash adds nothing); it
// has an expiry and optionally a number of uses, and each login spends one.
package bots

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // database/sql driver "sqlite"

	"github.com/limenhq/limen/gateway/identity"
)

// FileName is the store's file inside the data directory.
const FileName = "bots.db"

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

// Store is the bot directory; safe for concurrent use.
type Store struct {
	db  *sql.DB
	now func() time.Time
}

const schema = `CREATE TABLE IF NOT EXISTS bots (
	name    TEXT PRIMARY KEY,
	traits  TEXT NOT NULL,
	created INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS secrets (
	id        TEXT PRIMARY KEY,
	bot       TEXT NOT NULL REFERENCES bots(name) ON DELETE CASCADE,
	hash      BLOB NOT NULL,
	expires   INTEGER NOT NULL,
	uses_left INTEGER NOT NULL,
	by        TEXT NOT NULL
)`

// Open opens (creating if needed) the store at path. now may be nil.
func Open(path string, now func() time.Time) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open bot store %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open bot store %s: %w", path, err)
	}
	f.Close()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open bot store %s: %w", path, err)
	}
	if _, err := db.Exec(schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("open bot store %s: %w", path, err)
	}
	if now == nil {
		now = time.Now
	}
	return &Store{db: db, now: now}, nil
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
	_, err = s.db.ExecContext(ctx, `INSERT INTO bots (name, traits, created) VALUES (?, ?, ?)`, name, string(tj), s.now().Unix())
	if err != nil && strings.Contains(err.Error(), "UNIQUE") {
		return fmt.Errorf("bot %s: %w", name, ErrExists)
	}
	return err
}

// Remove deletes a bot and all its secrets.
func (s *Store) Remove(ctx context.Context, name string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM bots WHERE name = ?`, name)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("bot %s: %w", name, ErrNotFound)
	}
	return nil
}

// Get returns one bot.
func (s *Store) Get(ctx context.Context, name string) (Bot, error) {
	var b Bot
	var tj string
	var created int64
	err := s.db.QueryRowContext(ctx, `SELECT name, traits, created FROM bots WHERE name = ?`, name).Scan(&b.Name, &tj, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return b, fmt.Errorf("bot %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return b, err
	}
	b.Created = time.Unix(created, 0).UTC()
	return b, json.Unmarshal([]byte(tj), &b.Traits)
}

// List returns every bot, by name.
func (s *Store) List(ctx context.Context) ([]Bot, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, traits, created FROM bots ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Bot{}
	for rows.Next() {
		var b Bot
		var tj string
		var created int64
		if err := rows.Scan(&b.Name, &tj, &created); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(tj), &b.Traits); err != nil {
			return nil, err
		}
		b.Created = time.Unix(created, 0).UTC()
		out = append(out, b)
	}
	return out, rows.Err()
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
	if _, err := s.db.ExecContext(ctx, `INSERT INTO secrets (id, bot, hash, expires, uses_left, by) VALUES (?, ?, ?, ?, ?, ?)`,
		info.ID, bot, sum[:], info.Expires.Unix(), info.UsesLeft, info.By); err != nil {
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
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Bot{}, SecretInfo{}, err
	}
	defer tx.Rollback()
	var info SecretInfo
	var hash []byte
	var expires int64
	err = tx.QueryRowContext(ctx, `SELECT id, bot, hash, expires, uses_left, by FROM secrets WHERE id = ?`, id).
		Scan(&info.ID, &info.Bot, &hash, &expires, &info.UsesLeft, &info.By)
	if errors.Is(err, sql.ErrNoRows) {
		return Bot{}, SecretInfo{}, ErrBadSecret
	}
	if err != nil {
		return Bot{}, SecretInfo{}, err
	}
	info.Expires = time.Unix(expires, 0).UTC()
	if subtle.ConstantTimeCompare(hash, sum[:]) != 1 || info.Bot != bot || !s.now().Before(info.Expires) || info.UsesLeft == 0 {
		return Bot{}, SecretInfo{}, ErrBadSecret
	}
	if info.UsesLeft > 0 {
		info.UsesLeft--
		if _, err := tx.ExecContext(ctx, `UPDATE secrets SET uses_left = ? WHERE id = ?`, info.UsesLeft, id); err != nil {
			return Bot{}, SecretInfo{}, err
		}
	}
	if err := tx.Commit(); err != nil {
		return Bot{}, SecretInfo{}, err
	}
	b, err := s.Get(ctx, bot)
	if errors.Is(err, ErrNotFound) {
		return Bot{}, SecretInfo{}, ErrBadSecret
	}
	return b, info, err
}
