package locks

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/limenhq/limen/gateway/identity"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// FileName is the lock database's name inside the proxy's data directory.
const FileName = "locks.db"

// Path is the lock database's path in the proxy's data directory.
func Path(dataDir string) string { return filepath.Join(dataDir, FileName) }

// ErrNotFound means no lock is in force on the target.
var ErrNotFound = errors.New("no such lock")

const schema = `
CREATE TABLE IF NOT EXISTS locks (
	kind       TEXT    NOT NULL,
	name       TEXT    NOT NULL,
	reason     TEXT    NOT NULL,
	expires_ns INTEGER NOT NULL, -- 0: until removed
	created_by TEXT    NOT NULL,
	created_ns INTEGER NOT NULL,
	PRIMARY KEY (kind, name)
);
`

// Store is the proxy's durable record of locks (SQLite, WAL,
// synchronous=FULL), so that locks survive a restart. At most one lock per
// target is kept; setting another replaces it. It is safe for concurrent use.
type Store struct {
	db *sql.DB
}

// Open opens, creating if needed, the store at path (usually Path(dataDir)).
func Open(ctx context.Context, path string) (*Store, error) {
	p := strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(path)
	dsn := "file:" + p + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open lock store %s: %w", path, err)
	}
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("open lock store %s: create schema: %w (check the data directory is writable)", path, err)
	}
	return &Store{db: db}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Add stores l, replacing any lock on the same target.
func (s *Store) Add(ctx context.Context, l Lock) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("add lock: %w", err)
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO locks (kind, name, reason, expires_ns, created_by, created_ns)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (kind, name) DO UPDATE SET reason = excluded.reason, expires_ns = excluded.expires_ns,
			created_by = excluded.created_by, created_ns = excluded.created_ns`,
		string(l.Target.Kind), l.Target.Name, l.Reason, unixNano(l.Expires), l.CreatedBy, unixNano(l.CreatedAt))
	if err != nil {
		return fmt.Errorf("add lock on %s: %w", l.Target, err)
	}
	return nil
}

// Remove deletes the lock on t and returns it. It returns ErrNotFound when
// no lock on t is in force at now (an expired one is deleted all the same).
func (s *Store) Remove(ctx context.Context, t Target, now time.Time) (Lock, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Lock{}, fmt.Errorf("remove lock on %s: %w", t, err)
	}
	defer tx.Rollback()
	row := tx.QueryRowContext(ctx, `SELECT kind, name, reason, expires_ns, created_by, created_ns
		FROM locks WHERE kind = ? AND name = ?`, string(t.Kind), t.Name)
	l, err := scanLock(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Lock{}, fmt.Errorf("remove lock: %s: %w", t, ErrNotFound)
	}
	if err != nil {
		return Lock{}, fmt.Errorf("remove lock on %s: %w", t, err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM locks WHERE kind = ? AND name = ?`, string(t.Kind), t.Name); err != nil {
		return Lock{}, fmt.Errorf("remove lock on %s: %w", t, err)
	}
	if err := tx.Commit(); err != nil {
		return Lock{}, fmt.Errorf("remove lock on %s: %w", t, err)
	}
	if !l.Active(now) {
		return Lock{}, fmt.Errorf("remove lock: %s (it had expired): %w", t, ErrNotFound)
	}
	return l, nil
}

// List returns the locks in force at now, ordered by target, and deletes
// those that have expired.
func (s *Store) List(ctx context.Context, now time.Time) ([]Lock, error) {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM locks WHERE expires_ns != 0 AND expires_ns <= ?`, now.UnixNano()); err != nil {
		return nil, fmt.Errorf("list locks: prune expired: %w", err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT kind, name, reason, expires_ns, created_by, created_ns
		FROM locks ORDER BY kind, name`)
	if err != nil {
		return nil, fmt.Errorf("list locks: %w", err)
	}
	defer rows.Close()
	out := []Lock{}
	for rows.Next() {
		l, err := scanLock(rows)
		if err != nil {
			return nil, fmt.Errorf("list locks: %w", err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list locks: %w", err)
	}
	return out, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanLock(r scanner) (Lock, error) {
	var (
		l                  Lock
		kind               string
		expires, createdAt int64
	)
	if err := r.Scan(&kind, &l.Target.Name, &l.Reason, &expires, &l.CreatedBy, &createdAt); err != nil {
		return Lock{}, err
	}
	l.Target.Kind = identity.Kind(kind)
	l.Expires = fromUnixNano(expires)
	l.CreatedAt = fromUnixNano(createdAt)
	return l, nil
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
