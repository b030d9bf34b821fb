// Package sqlite is the embedded engine of gateway/store: one SQLite file
// per domain in the proxy's data directory (WAL; synchronous=FULL where a
// commit must survive a power cut), exactly the files earlier releases
// wrote, so that a data directory of theirs opens and migrates forward.
//
// Each file's schema version is its PRAGMA user_version, moved forward at
// open inside an exclusive transaction, so two processes opening one file
// at once apply each migration once. A file whose version is newer than
// this binary's migrations is refused (store.ErrSchemaNewer).
package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/limenhq/limen/gateway/store"
)

// The domains' file names inside the data directory.
const (
	UsersFile  = "users.db"
	BotsFile   = "bots.db"
	TokensFile = "tokens.db"
	LocksFile  = "locks.db"
	AuditFile  = "audit.db"
)

// Backend opens the domains' files in one data directory.
type Backend struct {
	dir      string
	mu       sync.Mutex
	closes   []func() error
	signins  *store.MemorySignIns
	policy   *store.MemoryPolicy
	sessions *store.MemorySessions
}

var _ store.Backend = (*Backend)(nil)

// New returns the Backend of dataDir; it opens nothing yet.
func New(dataDir string) *Backend { return &Backend{dir: dataDir} }

// Engine is the engine's name, as Backend.Engine reports it.
const Engine = "sqlite"

// Engine is "sqlite".
func (b *Backend) Engine() string { return Engine }

func (b *Backend) track(c func() error) {
	b.mu.Lock()
	b.closes = append(b.closes, c)
	b.mu.Unlock()
}

// Users opens DIR/users.db.
func (b *Backend) Users(ctx context.Context) (store.Users, error) {
	u, err := OpenUsers(ctx, filepath.Join(b.dir, UsersFile))
	if err == nil {
		b.track(u.Close)
	}
	return u, err
}

// Bots opens DIR/bots.db.
func (b *Backend) Bots(ctx context.Context) (store.Bots, error) {
	s, err := OpenBots(ctx, filepath.Join(b.dir, BotsFile))
	if err == nil {
		b.track(s.Close)
	}
	return s, err
}

// Tokens opens DIR/tokens.db.
func (b *Backend) Tokens(ctx context.Context) (store.Tokens, error) {
	s, err := OpenTokens(ctx, filepath.Join(b.dir, TokensFile))
	if err == nil {
		b.track(s.Close)
	}
	return s, err
}

// Locks opens DIR/locks.db.
func (b *Backend) Locks(ctx context.Context) (store.Locks, error) {
	s, err := OpenLocks(ctx, filepath.Join(b.dir, LocksFile))
	if err == nil {
		b.track(s.Close)
	}
	return s, err
}

// Audit opens DIR/audit.db.
func (b *Backend) Audit(ctx context.Context, readOnly bool) (store.Audit, error) {
	s, err := OpenAudit(ctx, filepath.Join(b.dir, AuditFile), readOnly)
	if err == nil {
		b.track(s.Close)
	}
	return s, err
}

// SignIns are the console's sign-ins, in memory (store.MemorySignIns): one
// set per Backend.
func (b *Backend) SignIns(context.Context) (store.SignIns, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.signins == nil {
		b.signins = store.NewMemorySignIns()
	}
	return b.signins, nil
}

// Policy is the policy floor and its refusals, in memory
// (store.MemoryPolicy): one proxy reads them, and its policy directory
// persists both already.
func (b *Backend) Policy(context.Context) (store.Policy, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.policy == nil {
		b.policy = store.NewMemoryPolicy()
	}
	return b.policy, nil
}

// Sessions is the session directory, in memory (store.MemorySessions):
// with one proxy, its registry is every session.
func (b *Backend) Sessions(context.Context) (store.Sessions, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sessions == nil {
		b.sessions = store.NewMemorySessions()
	}
	return b.sessions, nil
}

// Close closes every file the Backend opened.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var first error
	for _, c := range b.closes {
		if err := c(); err != nil && first == nil {
			first = err
		}
	}
	b.closes = nil
	return first
}

// options of one file's connection.
type options struct {
	readOnly    bool
	fullSync    bool // synchronous=FULL: in WAL mode NORMAL does not fsync at commit
	foreignKeys bool
	// noMkdir: the file's directory must exist (the lock file: a
	// missing data directory is an operator's mistake to report).
	noMkdir bool
}

// open opens the file at path (creating it 0600, its directory 0700) and
// migrates it to the domain's newest version.
func open(ctx context.Context, path, domain string, migrations []store.Migration, o options) (*sql.DB, error) {
	if o.readOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, err
		}
	} else if err := prepareFile(path, !o.noMkdir); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", dsn(path, o))
	if err != nil {
		return nil, err
	}
	// Setting journal_mode on a new file while another process does the
	// same fails with SQLITE_BUSY at once, the busy timeout
	// notwithstanding: such a start is retried for up to five seconds.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if o.readOnly {
			err = checkReadOnly(ctx, db, path, domain, migrations)
		} else {
			err = migrate(ctx, db, path, domain, migrations)
		}
		if err == nil || !isBusy(err) || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(10+rand.N(40)) * time.Millisecond)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func dsn(path string, o options) string {
	// SQLite URI: escape the characters that would end the path.
	p := strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(path)
	if o.readOnly {
		return "file:" + p + "?mode=ro&_pragma=busy_timeout(5000)&_pragma=query_only(1)"
	}
	q := "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)"
	if o.fullSync {
		q += "&_pragma=synchronous(FULL)"
	}
	if o.foreignKeys {
		q += "&_pragma=foreign_keys(1)"
	}
	return "file:" + p + q + "&_txlock=immediate"
}

// migrate applies the migrations newer than the file's user_version in one
// exclusive transaction: a second process opening the file meanwhile waits
// (busy_timeout) and then finds the work done.
func migrate(ctx context.Context, db *sql.DB, path, domain string, migrations []store.Migration) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		return fmt.Errorf("%s: lock for migration: %w (check the data directory is writable)", path, err)
	}
	done := false
	defer func() {
		if !done {
			conn.ExecContext(context.Background(), "ROLLBACK") //nolint:errcheck // the error that led here is returned
		}
	}()
	var have int
	if err := conn.QueryRowContext(ctx, "PRAGMA user_version").Scan(&have); err != nil {
		return fmt.Errorf("%s: read schema version: %w", path, err)
	}
	if err := store.CheckVersion(path, domain, have, migrations); err != nil {
		return err
	}
	for _, m := range migrations[have:] {
		if _, err := conn.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("%s: migrate %s schema to version %d: %w", path, domain, m.Version, err)
		}
	}
	if have < len(migrations) {
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(migrations))); err != nil {
			return fmt.Errorf("%s: set schema version: %w", path, err)
		}
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("%s: commit migration: %w", path, err)
	}
	done = true
	return nil
}

// checkReadOnly refuses a file a newer Limen migrated, and one whose schema
// this binary has not brought to date (it cannot migrate it read-only).
func checkReadOnly(ctx context.Context, db *sql.DB, path, domain string, migrations []store.Migration) error {
	var have int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&have); err != nil {
		return fmt.Errorf("%s: read schema version: %w", path, err)
	}
	return store.CheckVersion(path, domain, have, migrations)
}

// prepareFile creates the database's directory (0700) and the file itself
// with mode 0600 before SQLite opens it; SQLite gives its journal files the
// database file's mode, so nothing here is readable by other users.
func prepareFile(path string, mkdir bool) error {
	if mkdir {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// isBusy reports SQLite's "database is locked".
func isBusy(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "SQLITE_BUSY") || strings.Contains(err.Error(), "database is locked"))
}

// isUnique reports a UNIQUE or PRIMARY KEY constraint failure.
func isUnique(err error) bool {
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}

type scanner interface{ Scan(dest ...any) error }
