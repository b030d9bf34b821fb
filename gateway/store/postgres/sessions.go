package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/limenhq/limen/gateway/store"
)

var sessionsMigrations = []store.Migration{
	{Version: 1, SQL: `CREATE TABLE sessions (
	id       text PRIMARY KEY,
	proxy    text NOT NULL,
	info     text NOT NULL,
	start_ns bigint NOT NULL,
	end_ns   bigint NOT NULL
);
CREATE INDEX sessions_live  ON sessions (start_ns) WHERE end_ns = 0;
CREATE INDEX sessions_start ON sessions (start_ns)`},
	{Version: 2, SQL: `ALTER TABLE sessions ADD COLUMN kill_by text NOT NULL DEFAULT ''`},
}

type sessionsDB struct{ pool *pgxpool.Pool }

// Sessions returns the directory of every proxy's sessions.
func (b *Backend) Sessions(context.Context) (store.Sessions, error) { return sessionsDB{b.pool}, nil }

func (sessionsDB) Close() error { return nil }

func (s sessionsDB) Put(ctx context.Context, r store.SessionRecord) error {
	// An end never turns back into a live session: a late start record
	// (written behind) leaves the end in place.
	_, err := s.pool.Exec(ctx, `INSERT INTO sessions (id, proxy, info, start_ns, end_ns) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (id) DO UPDATE SET proxy = excluded.proxy, info = excluded.info, start_ns = excluded.start_ns,
			end_ns = excluded.end_ns WHERE sessions.end_ns = 0`, r.ID, r.Proxy, r.Info, r.StartNS, r.EndNS)
	return err
}

const sessionColumns = `id, proxy, info, start_ns, end_ns, kill_by`

func scanSession(r pgx.Row) (store.SessionRecord, error) {
	var x store.SessionRecord
	err := r.Scan(&x.ID, &x.Proxy, &x.Info, &x.StartNS, &x.EndNS, &x.KillBy)
	return x, err
}

func (s sessionsDB) List(ctx context.Context, limit int) ([]store.SessionRecord, error) {
	rows, err := s.pool.Query(ctx, `(SELECT `+sessionColumns+` FROM sessions WHERE end_ns = 0 ORDER BY start_ns DESC LIMIT $1)
		UNION ALL (SELECT `+sessionColumns+` FROM sessions WHERE end_ns <> 0 ORDER BY start_ns DESC LIMIT $1)
		ORDER BY start_ns DESC LIMIT $1`, max(limit, 1))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.SessionRecord, error) { return scanSession(r) })
}

func (s sessionsDB) Get(ctx context.Context, id string) (store.SessionRecord, error) {
	r, err := scanSession(s.pool.QueryRow(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, store.ErrNotFound
	}
	return r, err
}

// RequestKill marks the live session and announces it on
// store.KillsChannel in the same transaction: listeners hear of it only
// once the mark is committed, and re-read the row.
func (s sessionsDB) RequestKill(ctx context.Context, id, by string) (store.SessionRecord, error) {
	var r store.SessionRecord
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		r, err = scanSession(tx.QueryRow(ctx, `UPDATE sessions SET kill_by = $2 WHERE id = $1 AND end_ns = 0
			RETURNING `+sessionColumns, id, by))
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, store.KillsChannel, id)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return r, store.ErrNotFound
	}
	return r, err
}
