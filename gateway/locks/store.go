package locks

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/store"
	"github.com/limenhq/limen/gateway/store/sqlite"
)

// FileName is the lock database's name inside the proxy's data directory.
const FileName = sqlite.LocksFile

// Path is the lock database's path in the proxy's data directory.
func Path(dataDir string) string { return filepath.Join(dataDir, FileName) }

// ErrNotFound means no lock is in force on the target.
var ErrNotFound = errors.New("no such lock")

// Store is the proxy's durable record of locks, through a store.Locks
// driver (an SQLite file with synchronous=FULL, or the shared PostgreSQL
// database), so that locks survive a restart. At most one lock per target
// is kept; setting another replaces it. It is safe for concurrent use.
type Store struct {
	db store.Locks
}

// Open opens, creating if needed, the SQLite store at path (usually
// Path(dataDir)).
func Open(ctx context.Context, path string) (*Store, error) {
	db, err := sqlite.OpenLocks(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("%w (check the data directory is writable)", err)
	}
	return New(db), nil
}

// New builds the store over db; Close closes db.
func New(db store.Locks) *Store { return &Store{db: db} }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Add stores l, replacing any lock on the same target.
func (s *Store) Add(ctx context.Context, l Lock) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("add lock: %w", err)
	}
	if err := s.db.Put(ctx, toRecord(l)); err != nil {
		return fmt.Errorf("add lock on %s: %w", l.Target, err)
	}
	return nil
}

// Remove deletes the lock on t and returns it. It returns ErrNotFound when
// no lock on t is in force at now (an expired one is deleted all the same).
func (s *Store) Remove(ctx context.Context, t Target, now time.Time) (Lock, error) {
	r, err := s.db.Delete(ctx, string(t.Kind), t.Name)
	if errors.Is(err, store.ErrNotFound) {
		return Lock{}, fmt.Errorf("remove lock: %s: %w", t, ErrNotFound)
	}
	if err != nil {
		return Lock{}, fmt.Errorf("remove lock on %s: %w", t, err)
	}
	l := fromRecord(r)
	if !l.Active(now) {
		return Lock{}, fmt.Errorf("remove lock: %s (it had expired): %w", t, ErrNotFound)
	}
	return l, nil
}

// List returns the locks in force at now, ordered by target, and deletes
// those that have expired.
func (s *Store) List(ctx context.Context, now time.Time) ([]Lock, error) {
	recs, err := s.db.List(ctx, now.UnixNano())
	if err != nil {
		return nil, fmt.Errorf("list locks: %w", err)
	}
	out := make([]Lock, 0, len(recs))
	for _, r := range recs {
		out = append(out, fromRecord(r))
	}
	return out, nil
}

func toRecord(l Lock) store.LockRecord {
	return store.LockRecord{Kind: string(l.Target.Kind), Name: l.Target.Name, Reason: l.Reason,
		Expires: unixNano(l.Expires), CreatedBy: l.CreatedBy, Created: unixNano(l.CreatedAt)}
}

func fromRecord(r store.LockRecord) Lock {
	return Lock{Target: Target{Kind: identity.Kind(r.Kind), Name: r.Name}, Reason: r.Reason,
		Expires: fromUnixNano(r.Expires), CreatedBy: r.CreatedBy, CreatedAt: fromUnixNano(r.Created)}
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
