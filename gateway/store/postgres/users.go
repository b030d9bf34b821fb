package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/limenhq/limen/gateway/store"
)

var usersMigrations = []store.Migration{
	{Version: 1, SQL: `CREATE TABLE users (
	name    text PRIMARY KEY,
	hash    bytea NOT NULL,
	traits  text NOT NULL,
	created bigint NOT NULL,
	updated bigint NOT NULL
)`},
}

type users struct{ pool *pgxpool.Pool }

func (users) Close() error { return nil }

func (s users) Insert(ctx context.Context, u store.UserRecord) error {
	tag, err := s.pool.Exec(ctx, `INSERT INTO users (name, hash, traits, created, updated)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO NOTHING`, u.Name, u.Hash, u.Traits, u.Created, u.Updated)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return store.ErrExists
	}
	return nil
}

func (s users) Delete(ctx context.Context, name string) error {
	return affected(s.pool.Exec(ctx, `DELETE FROM users WHERE name = $1`, name))
}

func (s users) SetHash(ctx context.Context, name string, hash []byte, updated int64) error {
	return affected(s.pool.Exec(ctx, `UPDATE users SET hash = $1, updated = $2 WHERE name = $3`, hash, updated, name))
}

func (s users) Get(ctx context.Context, name string) (store.UserRecord, error) {
	var u store.UserRecord
	err := s.pool.QueryRow(ctx, `SELECT name, hash, traits, created, updated FROM users WHERE name = $1`, name).
		Scan(&u.Name, &u.Hash, &u.Traits, &u.Created, &u.Updated)
	if errors.Is(err, pgx.ErrNoRows) {
		return u, store.ErrNotFound
	}
	return u, err
}

func (s users) List(ctx context.Context) ([]store.UserRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, traits, created, updated FROM users ORDER BY name`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.UserRecord, error) {
		var u store.UserRecord
		err := r.Scan(&u.Name, &u.Traits, &u.Created, &u.Updated)
		return u, err
	})
}
