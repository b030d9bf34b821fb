package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/limenhq/limen/gateway/store"
)

var tokensMigrations = []store.Migration{
	{Version: 1, SQL: `CREATE TABLE IF NOT EXISTS join_tokens (
		hash BLOB PRIMARY KEY, id TEXT NOT NULL, cluster TEXT NOT NULL, creator TEXT NOT NULL,
		created INTEGER NOT NULL, expires INTEGER NOT NULL, used INTEGER, used_by TEXT)`},
}

// Tokens is the join-token driver over tokens.db.
type Tokens struct{ db *sql.DB }

// OpenTokens opens (creating and migrating) the token file at path.
func OpenTokens(ctx context.Context, path string) (*Tokens, error) {
	db, err := open(ctx, path, "tokens", tokensMigrations, options{})
	if err != nil {
		return nil, fmt.Errorf("open token store %s: %w", path, err)
	}
	return &Tokens{db: db}, nil
}

func (s *Tokens) Close() error { return s.db.Close() }

func (s *Tokens) Insert(ctx context.Context, t store.TokenRecord, beforeCommit func() error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO join_tokens (hash, id, cluster, creator, created, expires) VALUES (?, ?, ?, ?, ?, ?)`,
		t.Hash, t.ID, t.Cluster, t.Creator, t.Created, t.Expires); err != nil {
		if isUnique(err) {
			return store.ErrExists
		}
		return err
	}
	if beforeCommit != nil {
		if err := beforeCommit(); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func (s *Tokens) Update(ctx context.Context, hash []byte, fn func(*store.TokenRecord) error) error {
	tx, err := s.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock first
	if err != nil {
		return err
	}
	defer tx.Rollback()
	t, err := scanToken(tx.QueryRowContext(ctx, `SELECT hash, id, cluster, creator, created, expires, used, used_by
		FROM join_tokens WHERE hash = ?`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	if err != nil {
		return err
	}
	if err := fn(&t); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE join_tokens SET used = ?, used_by = ?, expires = ? WHERE hash = ?`,
		nullable(t.Used), t.UsedBy, t.Expires, hash); err != nil {
		return err
	}
	return tx.Commit()
}

func (s *Tokens) List(ctx context.Context) ([]store.TokenRecord, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT hash, id, cluster, creator, created, expires, used, used_by
		FROM join_tokens ORDER BY created DESC, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.TokenRecord
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

func scanToken(r scanner) (store.TokenRecord, error) {
	var t store.TokenRecord
	var used sql.NullInt64
	var usedBy sql.NullString
	err := r.Scan(&t.Hash, &t.ID, &t.Cluster, &t.Creator, &t.Created, &t.Expires, &used, &usedBy)
	t.Used, t.UsedBy = used.Int64, usedBy.String
	return t, err
}

func nullable(n int64) any {
	if n == 0 {
		return nil
	}
	return n
}
