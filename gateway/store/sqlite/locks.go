package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/limenhq/limen/gateway/store"
)

var locksMigrations = []store.Migration{
	{Version: 1, SQL: `CREATE TABLE IF NOT EXISTS locks (
	kind       TEXT    NOT NULL,
	name       TEXT    NOT NULL,
	reason     TEXT    NOT NULL,
	expires_ns INTEGER NOT NULL, -- 0: until removed
	created_by TEXT    NOT NULL,
	created_ns INTEGER NOT NULL,
	PRIMARY KEY (kind, name)
)`},
}

// Locks is the lock driver over locks.db (synchronous=FULL, so that a lock
// survives a power cut once set).
type Locks struct{ db *sql.DB }

// OpenLocks opens (creating and migrating) the lock file at path.
func OpenLocks(ctx context.Context, path string) (*Locks, error) {
	db, err := open(ctx, path, "locks", locksMigrations, options{fullSync: true, noMkdir: true})
	if err != nil {
		return nil, fmt.Errorf("open lock store %s: %w", path, err)
	}
	return &Locks{db: db}, nil
}

func (s *Locks) Close() error { return s.db.Close() }

func (s *Locks) Put(ctx context.Context, l store.LockRecord) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO locks (kind, name, reason, expires_ns, created_by, created_ns)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (kind, name) DO UPDATE SET reason = excluded.reason, expires_ns = excluded.expires_ns,
			created_by = excluded.created_by, created_ns = excluded.created_ns`,
		l.Kind, l.Name, l.Reason, l.Expires, l.CreatedBy, l.Created)
	return err
}

const lockColumns = `kind, name, reason, expires_ns, created_by, created_ns`

func (s *Locks) Delete(ctx context.Context, kind, name string) (store.LockRecord, error) {
	var l store.LockRecord
	err := s.db.QueryRowContext(ctx, `DELETE FROM locks WHERE kind = ? AND name = ? RETURNING `+lockColumns, kind, name).
		Scan(&l.Kind, &l.Name, &l.Reason, &l.Expires, &l.CreatedBy, &l.Created)
	if errors.Is(err, sql.ErrNoRows) {
		return l, store.ErrNotFound
	}
	return l, err
}

func (s *Locks) List(ctx context.Context, nowNS int64) ([]store.LockRecord, error) {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM locks WHERE expires_ns != 0 AND expires_ns <= ?`, nowNS); err != nil {
		return nil, fmt.Errorf("prune expired: %w", err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+lockColumns+` FROM locks ORDER BY kind, name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.LockRecord{}
	for rows.Next() {
		var l store.LockRecord
		if err := rows.Scan(&l.Kind, &l.Name, &l.Reason, &l.Expires, &l.CreatedBy, &l.Created); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}
