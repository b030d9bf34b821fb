// Package users is Limen's embedded user directory: local users with bcrypt
// password hashes and traits, kept in an SQLite file in the proxy's data
// directory, and the rate-limited password check that `limen login` uses.
package users

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/crypto/bcrypt"
	_ "modernc.org/sqlite" // database/sql driver "sqlite"

	"github.com/limenhq/limen/gateway/identity"
)

// Errors callers map to responses.
var (
	// ErrBadCredentials is the single answer for an unknown user and a wrong
	// password, so the two cannot be told apart.
	ErrBadCredentials = errors.New("invalid user name or password")
	// ErrRateLimited means too many recent attempts for the user or address.
	ErrRateLimited = errors.New("too many login attempts: wait a minute and try again")
	// ErrNotFound means no user has that name.
	ErrNotFound = errors.New("no such user")
	// ErrExists means a user of that name exists already.
	ErrExists = errors.New("user exists already")
)

// Password length bounds; bcrypt reads at most 72 bytes.
const (
	MinPasswordLen = 8
	MaxPasswordLen = 72
	// DefaultCost is the bcrypt cost of new hashes.
	DefaultCost = 11
)

// FileName is the store's file inside the data directory.
const FileName = "users.db"

// Path is the store's path in dataDir.
func Path(dataDir string) string { return filepath.Join(dataDir, FileName) }

// User is a local user as listed; it never carries the hash.
type User struct {
	Name    string              `json:"name"`
	Traits  map[string][]string `json:"traits,omitempty"`
	Created time.Time           `json:"created"`
	Updated time.Time           `json:"updated"`
}

// Options tunes a Store; the zero value is the production default.
type Options struct {
	// Cost is the bcrypt cost (0: DefaultCost). Tests use bcrypt.MinCost.
	Cost int
	// Limits bounds login attempts; zero fields take DefaultLimits.
	Limits Limits
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Store is the user directory. It is safe for concurrent use, also by
// several processes on one host (`limen users add --local` beside a running
// proxy): SQLite serializes writers and waits up to five seconds for a lock.
type Store struct {
	db      *sql.DB
	cost    int
	dummy   []byte
	limiter *limiter
	now     func() time.Time
}

const schema = `CREATE TABLE IF NOT EXISTS users (
	name     TEXT PRIMARY KEY,
	hash     BLOB NOT NULL,
	traits   TEXT NOT NULL,
	created  INTEGER NOT NULL,
	updated  INTEGER NOT NULL
)`

// Open opens (creating if needed) the store at path.
func Open(path string, opts Options) (*Store, error) {
	if err := prepareDBFile(path); err != nil {
		return nil, fmt.Errorf("open user store %s: %w", path, err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open user store %s: %w", path, err)
	}
	if _, err := db.Exec(schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("open user store %s: %w", path, err)
	}
	s := &Store{db: db, cost: opts.Cost, now: opts.Now, limiter: newLimiter(opts.Limits)}
	if s.cost == 0 {
		s.cost = DefaultCost
	}
	if s.now == nil {
		s.now = time.Now
	}
	// The hash compared against when the user does not exist, so an unknown
	// name costs the same bcrypt work as a wrong password.
	random := make([]byte, 32)
	rand.Read(random)
	if s.dummy, err = bcrypt.GenerateFromPassword(random[:MaxPasswordLen/4], s.cost); err != nil {
		db.Close()
		return nil, fmt.Errorf("user store: %w", err)
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// CheckPassword enforces the password length bounds.
func CheckPassword(pw string) error {
	switch {
	case len(pw) < MinPasswordLen:
		return fmt.Errorf("password is shorter than %d characters", MinPasswordLen)
	case len(pw) > MaxPasswordLen:
		return fmt.Errorf("password is longer than %d bytes", MaxPasswordLen)
	}
	return nil
}

func checkUser(name string, traits map[string][]string) error {
	return identity.Principal{Kind: identity.KindUser, Name: name, Traits: traits}.Validate()
}

// Add creates a user.
func (s *Store) Add(ctx context.Context, name, password string, traits map[string][]string) error {
	if err := checkUser(name, traits); err != nil {
		return err
	}
	if err := CheckPassword(password); err != nil {
		return err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), s.cost)
	if err != nil {
		return fmt.Errorf("hash password: %w", err)
	}
	tj, _ := json.Marshal(traits)
	now := s.now().Unix()
	res, err := s.db.ExecContext(ctx, `INSERT INTO users (name, hash, traits, created, updated)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT(name) DO NOTHING`, name, hash, string(tj), now, now)
	if err != nil {
		return fmt.Errorf("add user %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("add user %s: %w", name, ErrExists)
	}
	return nil
}

// Remove deletes a user.
func (s *Store) Remove(ctx context.Context, name string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM users WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("remove user %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("remove user %s: %w", name, ErrNotFound)
	}
	return nil
}

// SetPassword replaces a user's password.
func (s *Store) SetPassword(ctx context.Context, name, password string) error {
	if err := CheckPassword(password); err != nil {
		return err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), s.cost)
	if err != nil {
		return fmt.Errorf("hash password: %w", err)
	}
	res, err := s.db.ExecContext(ctx, `UPDATE users SET hash = ?, updated = ? WHERE name = ?`, hash, s.now().Unix(), name)
	if err != nil {
		return fmt.Errorf("set password of %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("set password of %s: %w", name, ErrNotFound)
	}
	return nil
}

// List returns every user, by name.
func (s *Store) List(ctx context.Context) ([]User, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, traits, created, updated FROM users ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	defer rows.Close()
	var out []User
	for rows.Next() {
		u, _, err := scanUser(rows, false)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, rows.Err()
}

// Get returns the user name; an error wrapping ErrNotFound when there is
// none (the console checks its signed-in users on every request).
func (s *Store) Get(ctx context.Context, name string) (User, error) {
	row := s.db.QueryRowContext(ctx, `SELECT name, traits, created, updated FROM users WHERE name = ?`, name)
	u, _, err := scanUser(row, false)
	if errors.Is(err, sql.ErrNoRows) {
		return User{}, fmt.Errorf("user %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return User{}, fmt.Errorf("look up user %s: %w", name, err)
	}
	return u, nil
}

type scanner interface{ Scan(...any) error }

func scanUser(r scanner, withHash bool) (User, []byte, error) {
	var u User
	var tj string
	var created, updated int64
	var hash []byte
	dest := []any{&u.Name, &tj, &created, &updated}
	if withHash {
		dest = append(dest, &hash)
	}
	if err := r.Scan(dest...); err != nil {
		return User{}, nil, err
	}
	if err := json.Unmarshal([]byte(tj), &u.Traits); err != nil {
		return User{}, nil, fmt.Errorf("user %s: stored traits are corrupt: %w", u.Name, err)
	}
	u.Created, u.Updated = time.Unix(created, 0).UTC(), time.Unix(updated, 0).UTC()
	return u, hash, nil
}

// Authenticate checks name and password for a login from addr (the client's
// IP address). Unknown users and wrong passwords both cost one bcrypt
// comparison and both return ErrBadCredentials; too many attempts for the
// name or the address return ErrRateLimited before any comparison.
func (s *Store) Authenticate(ctx context.Context, name, password, addr string) (User, error) {
	// No stored name is longer than MaxNameLen, so a longer one only needs a
	// bounded limiter key.
	key := name
	if len(key) > identity.MaxNameLen {
		key = key[:identity.MaxNameLen]
	}
	if !s.limiter.allow(key, addr, s.now()) {
		return User{}, ErrRateLimited
	}
	row := s.db.QueryRowContext(ctx, `SELECT name, traits, created, updated, hash FROM users WHERE name = ?`, name)
	u, hash, err := scanUser(row, true)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return User{}, fmt.Errorf("look up user: %w", err)
	}
	found := err == nil
	if !found || len(password) > MaxPasswordLen {
		hash = s.dummy
	}
	pwErr := bcrypt.CompareHashAndPassword(hash, []byte(password))
	if !found || pwErr != nil || len(password) > MaxPasswordLen {
		return User{}, ErrBadCredentials
	}
	return u, nil
}

// prepareDBFile creates the database's directory (0700) and the file itself
// with mode 0600 before SQLite opens it; SQLite gives its journal files the
// database file's mode, so nothing here is readable by other users.
func prepareDBFile(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}
