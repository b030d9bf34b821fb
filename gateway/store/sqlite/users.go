package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/limenhq/limen/gateway/store"
)

var usersMigrations = []store.Migration{
	{Version: 1, SQL: `CREATE TABLE IF NOT EXISTS users (
	name     TEXT PRIMARY KEY,
	hash     BLOB NOT NULL,
	traits   TEXT NOT NULL,
	created  INTEGER NOT NULL,
	updated  INTEGER NOT NULL
)`},
}

// Users is the users driver over users.db.
type Users struct{ db *sql.DB }

// OpenUsers opens (creating and migrating) the user file at path.
func OpenUsers(ctx context.Context, path string) (*Users, error) {
	db, err := open(ctx, path, "users", usersMigrations, options{})
	if err != nil {
		return nil, fmt.Errorf("open user store %s: %w", path, err)
	}
	return &Users{db: db}, nil
}

func (s *Users) Close() error { return s.db.Close() }

func (s *Users) Insert(ctx context.Context, u store.UserRecord) error {
	res, err := s.db.ExecContext(ctx, `INSERT INTO users (name, hash, traits, created, updated)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT(name) DO NOTHING`, u.Name, u.Hash, u.Traits, u.Created, u.Updated)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return store.ErrExists
	}
	return nil
}

func (s *Users) Delete(ctx context.Context, name string) error {
	return affected(s.db.ExecContext(ctx, `DELETE FROM users WHERE name = ?`, name))
}

func (s *Users) SetHash(ctx context.Context, name string, hash []byte, updated int64) error {
	return affected(s.db.ExecContext(ctx, `UPDATE users SET hash = ?, updated = ? WHERE name = ?`, hash, updated, name))
}

func (s *Users) Get(ctx context.Context, name string) (store.UserRecord, error) {
	var u store.UserRecord
	err := s.db.QueryRowContext(ctx, `SELECT name, hash, traits, created, updated FROM users WHERE name = ?`, name).
		Scan(&u.Name, &u.Hash, &u.Traits, &u.Created, &u.Updated)
	if errors.Is(err, sql.ErrNoRows) {
		return u, store.ErrNotFound
	}
	return u, err
}

func (s *Users) List(ctx context.Context) ([]store.UserRecord, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, traits, created, updated FROM users ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.UserRecord
	for rows.Next() {
		var u store.UserRecord
		if err := rows.Scan(&u.Name, &u.Traits, &u.Created, &u.Updated); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, rows.Err()
}

// affected turns "no row changed" into store.ErrNotFound.
func affected(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return store.ErrNotFound
	}
	return nil
}
