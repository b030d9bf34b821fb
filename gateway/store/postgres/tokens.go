package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/limenhq/limen/gateway/store"
)

var tokensMigrations = []store.Migration{
	{Version: 1, SQL: `CREATE TABLE join_tokens (
	hash    bytea PRIMARY KEY,
	id      text NOT NULL,
	cluster text NOT NULL,
	creator text NOT NULL,
	created bigint NOT NULL,
	expires bigint NOT NULL,
	used    bigint,
	used_by text
)`},
}

type tokens struct{ pool *pgxpool.Pool }

func (tokens) Close() error { return nil }

func (s tokens) Insert(ctx context.Context, t store.TokenRecord, beforeCommit func() error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO join_tokens (hash, id, cluster, creator, created, expires) VALUES ($1, $2, $3, $4, $5, $6)`,
			t.Hash, t.ID, t.Cluster, t.Creator, t.Created, t.Expires)
		if pgCode(err) == uniqueViolation {
			return store.ErrExists
		}
		if err != nil || beforeCommit == nil {
			return err
		}
		return beforeCommit()
	})
}

const tokenColumns = `hash, id, cluster, creator, created, expires, used, used_by`

func scanToken(r pgx.Row) (store.TokenRecord, error) {
	var t store.TokenRecord
	var used *int64
	var usedBy *string
	err := r.Scan(&t.Hash, &t.ID, &t.Cluster, &t.Creator, &t.Created, &t.Expires, &used, &usedBy)
	if used != nil {
		t.Used = *used
	}
	if usedBy != nil {
		t.UsedBy = *usedBy
	}
	return t, err
}

func (s tokens) Update(ctx context.Context, hash []byte, fn func(*store.TokenRecord) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// FOR UPDATE: concurrent redemptions of one token queue here, so
		// that exactly one finds it unused.
		t, err := scanToken(tx.QueryRow(ctx, `SELECT `+tokenColumns+` FROM join_tokens WHERE hash = $1 FOR UPDATE`, hash))
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if err := fn(&t); err != nil {
			return err
		}
		var used *int64
		if t.Used != 0 {
			used = &t.Used
		}
		_, err = tx.Exec(ctx, `UPDATE join_tokens SET used = $1, used_by = $2, expires = $3 WHERE hash = $4`, used, t.UsedBy, t.Expires, hash)
		return err
	})
}

func (s tokens) List(ctx context.Context) ([]store.TokenRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+tokenColumns+` FROM join_tokens ORDER BY created DESC, id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.TokenRecord, error) { return scanToken(r) })
}
