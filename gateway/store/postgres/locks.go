package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/limenhq/limen/gateway/store"
)

var locksMigrations = []store.Migration{
	{Version: 1, SQL: `CREATE TABLE locks (
	kind       text NOT NULL,
	name       text NOT NULL,
	reason     text NOT NULL,
	expires_ns bigint NOT NULL, -- 0: until removed
	created_by text NOT NULL,
	created_ns bigint NOT NULL,
	PRIMARY KEY (kind, name)
)`},
	// Every change, by any writer (a proxy, limen lock --local), is
	// announced on LocksChannel with its target.
	{Version: 2, SQL: `CREATE FUNCTION limen_locks_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'DELETE' THEN
		PERFORM pg_notify('limen_locks', OLD.kind || ':' || OLD.name);
	ELSE
		PERFORM pg_notify('limen_locks', NEW.kind || ':' || NEW.name);
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER locks_notify AFTER INSERT OR UPDATE OR DELETE ON locks
	FOR EACH ROW EXECUTE FUNCTION limen_locks_notify()`},
}

type locks struct{ pool *pgxpool.Pool }

func (locks) Close() error { return nil }

const lockColumns = `kind, name, reason, expires_ns, created_by, created_ns`

func scanLock(r pgx.Row) (store.LockRecord, error) {
	var l store.LockRecord
	err := r.Scan(&l.Kind, &l.Name, &l.Reason, &l.Expires, &l.CreatedBy, &l.Created)
	return l, err
}

func (s locks) Put(ctx context.Context, l store.LockRecord) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO locks (`+lockColumns+`) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (kind, name) DO UPDATE SET reason = excluded.reason, expires_ns = excluded.expires_ns,
			created_by = excluded.created_by, created_ns = excluded.created_ns`,
		l.Kind, l.Name, l.Reason, l.Expires, l.CreatedBy, l.Created)
	return err
}

func (s locks) Delete(ctx context.Context, kind, name string) (store.LockRecord, error) {
	l, err := scanLock(s.pool.QueryRow(ctx, `DELETE FROM locks WHERE kind = $1 AND name = $2 RETURNING `+lockColumns, kind, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return l, store.ErrNotFound
	}
	return l, err
}

func (s locks) List(ctx context.Context, nowNS int64) ([]store.LockRecord, error) {
	if _, err := s.pool.Exec(ctx, `DELETE FROM locks WHERE expires_ns <> 0 AND expires_ns <= $1`, nowNS); err != nil {
		return nil, fmt.Errorf("prune expired: %w", err)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+lockColumns+` FROM locks ORDER BY kind, name`)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.LockRecord, error) { return scanLock(r) })
	if out == nil && err == nil {
		out = []store.LockRecord{}
	}
	return out, err
}
