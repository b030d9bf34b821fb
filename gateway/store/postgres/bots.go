package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/limenhq/limen/gateway/store"
)

var botsMigrations = []store.Migration{
	{Version: 1, SQL: `CREATE TABLE bots (
	name    text PRIMARY KEY,
	traits  text NOT NULL,
	created bigint NOT NULL
);
CREATE TABLE bot_secrets (
	id        text PRIMARY KEY,
	bot       text NOT NULL REFERENCES bots (name) ON DELETE CASCADE,
	hash      bytea NOT NULL,
	expires   bigint NOT NULL,
	uses_left integer NOT NULL,
	created_by text NOT NULL
);
CREATE INDEX bot_secrets_bot ON bot_secrets (bot)`},
}

type bots struct{ pool *pgxpool.Pool }

func (bots) Close() error { return nil }

func (s bots) Insert(ctx context.Context, b store.BotRecord) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO bots (name, traits, created) VALUES ($1, $2, $3)`, b.Name, b.Traits, b.Created)
	if pgCode(err) == uniqueViolation {
		return store.ErrExists
	}
	return err
}

func (s bots) Delete(ctx context.Context, name string) error {
	return affected(s.pool.Exec(ctx, `DELETE FROM bots WHERE name = $1`, name))
}

func (s bots) Get(ctx context.Context, name string) (store.BotRecord, error) {
	var b store.BotRecord
	err := s.pool.QueryRow(ctx, `SELECT name, traits, created FROM bots WHERE name = $1`, name).Scan(&b.Name, &b.Traits, &b.Created)
	if errors.Is(err, pgx.ErrNoRows) {
		return b, store.ErrNotFound
	}
	return b, err
}

func (s bots) List(ctx context.Context) ([]store.BotRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, traits, created FROM bots ORDER BY name`)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.BotRecord, error) {
		var b store.BotRecord
		err := r.Scan(&b.Name, &b.Traits, &b.Created)
		return b, err
	})
	if out == nil && err == nil {
		out = []store.BotRecord{}
	}
	return out, err
}

func (s bots) InsertSecret(ctx context.Context, r store.SecretRecord) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO bot_secrets (id, bot, hash, expires, uses_left, created_by) VALUES ($1, $2, $3, $4, $5, $6)`,
		r.ID, r.Bot, r.Hash, r.Expires, r.UsesLeft, r.By)
	if pgCode(err) == foreignKeyViolation {
		return store.ErrNotFound
	}
	return err
}

func (s bots) UpdateSecret(ctx context.Context, id string, fn func(*store.SecretRecord) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var r store.SecretRecord
		// FOR UPDATE: a concurrent login with the same secret waits here,
		// so that a use is never spent twice.
		err := tx.QueryRow(ctx, `SELECT id, bot, hash, expires, uses_left, created_by FROM bot_secrets WHERE id = $1 FOR UPDATE`, id).
			Scan(&r.ID, &r.Bot, &r.Hash, &r.Expires, &r.UsesLeft, &r.By)
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		before := r
		if err := fn(&r); err != nil {
			return err
		}
		if r.UsesLeft == before.UsesLeft && r.Expires == before.Expires {
			return nil
		}
		_, err = tx.Exec(ctx, `UPDATE bot_secrets SET uses_left = $1, expires = $2 WHERE id = $3`, r.UsesLeft, r.Expires, id)
		return err
	})
}
