package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/limenhq/limen/gateway/store"
)

var policyMigrations = []store.Migration{
	{Version: 1, SQL: `CREATE TABLE policy_floor (
	id       integer PRIMARY KEY CHECK (id = 1),
	revision text NOT NULL,
	key      text NOT NULL,
	digest   bytea NOT NULL
);
CREATE TABLE policy_refusals (
	seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	time_ns    bigint NOT NULL,
	reason     text NOT NULL,
	revision   text NOT NULL,
	unverified boolean NOT NULL,
	active     text NOT NULL,
	error      text NOT NULL,
	proxy_id   text NOT NULL
)`},
}

type policy struct{ pool *pgxpool.Pool }

// Policy returns the floor and refusals every proxy shares.
func (b *Backend) Policy(context.Context) (store.Policy, error) { return policy{b.pool}, nil }

func (policy) Close() error { return nil }

func (p policy) Floor(ctx context.Context) (store.FloorRecord, bool, error) {
	var f store.FloorRecord
	err := p.pool.QueryRow(ctx, `SELECT revision, key, digest FROM policy_floor WHERE id = 1`).Scan(&f.Revision, &f.Key, &f.Digest)
	if errors.Is(err, pgx.ErrNoRows) {
		return f, false, nil
	}
	return f, err == nil, err
}

func (p policy) RaiseFloor(ctx context.Context, f store.FloorRecord) (store.FloorRecord, error) {
	// One statement: two proxies raising at once leave the greater.
	var out store.FloorRecord
	err := p.pool.QueryRow(ctx, `WITH up AS (
		INSERT INTO policy_floor (id, revision, key, digest) VALUES (1, $1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET revision = excluded.revision, key = excluded.key, digest = excluded.digest
			WHERE policy_floor.key < excluded.key
		RETURNING revision, key, digest)
		SELECT revision, key, digest FROM up
		UNION ALL SELECT revision, key, digest FROM policy_floor WHERE NOT EXISTS (SELECT 1 FROM up)`,
		f.Revision, f.Key, f.Digest).Scan(&out.Revision, &out.Key, &out.Digest)
	return out, err
}

func (p policy) AddRefusal(ctx context.Context, r store.RefusalRecord) error {
	_, err := p.pool.Exec(ctx, `INSERT INTO policy_refusals (time_ns, reason, revision, unverified, active, error, proxy_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, r.TimeNS, r.Reason, r.Revision, r.Unverified, r.Active, r.Error, r.ProxyID)
	return err
}

func (p policy) Refusals(ctx context.Context, limit int) ([]store.RefusalRecord, error) {
	rows, err := p.pool.Query(ctx, `SELECT time_ns, reason, revision, unverified, active, error, proxy_id
		FROM policy_refusals ORDER BY seq DESC LIMIT $1`, max(limit, 1))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.RefusalRecord, error) {
		var x store.RefusalRecord
		err := r.Scan(&x.TimeNS, &x.Reason, &x.Revision, &x.Unverified, &x.Active, &x.Error, &x.ProxyID)
		return x, err
	})
}
