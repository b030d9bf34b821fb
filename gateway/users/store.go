// Package users is Limen's user directory: local users with bcrypt
// password hashes and traits, kept through gateway/store (an SQLite file in
// the proxy's data directory, or the shared PostgreSQL database), and the
// rate-limited password check that `limen login` uses.
package users

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/store"
	"github.com/limenhq/limen/gateway/store/sqlite"
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
const FileName = sqlite.UsersFile

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

// Store is the user directory over a store.Users driver (SQLite or
// PostgreSQL). It is safe for concurrent use, also by several processes
// (`limen users add --local` beside a running proxy, or several proxies on
// one database).
type Store struct {
	db      store.Users
	cost    int
	dummy   []byte
	limiter *limiter
	now     func() time.Time
}

// Open opens (creating if needed) the SQLite store at path.
func Open(path string, opts Options) (*Store, error) {
	db, err := sqlite.OpenUsers(context.Background(), path)
	if err != nil {
		return nil, err
	}
	s, err := New(db, opts)
	if err != nil {
		db.Close()
	}
	return s, err
}

// New builds the directory over db; Close closes db.
func New(db store.Users, opts Options) (*Store, error) {
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
	var err error
	if s.dummy, err = bcrypt.GenerateFromPassword(random[:MaxPasswordLen/4], s.cost); err != nil {
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
	err = s.db.Insert(ctx, store.UserRecord{Name: name, Hash: hash, Traits: string(tj), Created: now, Updated: now})
	if errors.Is(err, store.ErrExists) {
		return fmt.Errorf("add user %s: %w", name, ErrExists)
	}
	if err != nil {
		return fmt.Errorf("add user %s: %w", name, err)
	}
	return nil
}

// Remove deletes a user.
func (s *Store) Remove(ctx context.Context, name string) error {
	err := s.db.Delete(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("remove user %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("remove user %s: %w", name, err)
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
	err = s.db.SetHash(ctx, name, hash, s.now().Unix())
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("set password of %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("set password of %s: %w", name, err)
	}
	return nil
}

// List returns every user, by name.
func (s *Store) List(ctx context.Context) ([]User, error) {
	recs, err := s.db.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	var out []User
	for _, r := range recs {
		u, err := fromRecord(r)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

// Get returns the user name; an error wrapping ErrNotFound when there is
// none (the console checks its signed-in users on every request).
func (s *Store) Get(ctx context.Context, name string) (User, error) {
	r, err := s.db.Get(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return User{}, fmt.Errorf("user %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return User{}, fmt.Errorf("look up user %s: %w", name, err)
	}
	return fromRecord(r)
}

func fromRecord(r store.UserRecord) (User, error) {
	u := User{Name: r.Name, Created: time.Unix(r.Created, 0).UTC(), Updated: time.Unix(r.Updated, 0).UTC()}
	if err := json.Unmarshal([]byte(r.Traits), &u.Traits); err != nil {
		return User{}, fmt.Errorf("user %s: stored traits are corrupt: %w", u.Name, err)
	}
	return u, nil
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
	r, err := s.db.Get(ctx, name)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return User{}, fmt.Errorf("look up user: %w", err)
	}
	found := err == nil
	hash := r.Hash
	var u User
	if found {
		if u, err = fromRecord(r); err != nil {
			return User{}, err
		}
	}
	if !found || len(password) > MaxPasswordLen {
		hash = s.dummy
	}
	pwErr := bcrypt.CompareHashAndPassword(hash, []byte(password))
	if !found || pwErr != nil || len(password) > MaxPasswordLen {
		return User{}, ErrBadCredentials
	}
	return u, nil
}
