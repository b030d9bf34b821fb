package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/limenhq/limen/gateway/store"
)

var signinsMigrations = []store.Migration{
	{Version: 1, SQL: `CREATE TABLE console_signins (
	digest     text PRIMARY KEY,
	principal  text NOT NULL,
	csrf       text NOT NULL,
	expires_ns bigint NOT NULL,
	local      boolean NOT NULL
);
CREATE INDEX console_signins_expires ON console_signins (expires_ns)`},
}

type signins struct{ pool *pgxpool.Pool }

// SignIns returns the console's sign-ins, shared by every proxy.
func (b *Backend) SignIns(context.Context) (store.SignIns, error) { return signins{b.pool}, nil }

func (signins) Close() error { return nil }

func (s signins) Put(ctx context.Context, r store.SignInRecord, nowNS int64) error {
	// Expired sign-ins are deleted when a new one comes, not on every
	// request (Get skips them).
	if _, err := s.pool.Exec(ctx, `DELETE FROM console_signins WHERE expires_ns <= $1`, nowNS); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO console_signins (digest, principal, csrf, expires_ns, local) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (digest) DO UPDATE SET principal = excluded.principal, csrf = excluded.csrf,
			expires_ns = excluded.expires_ns, local = excluded.local`, r.Digest, r.Principal, r.CSRF, r.Expires, r.Local)
	return err
}

func (s signins) Get(ctx context.Context, digest string, nowNS int64) (store.SignInRecord, error) {
	var r store.SignInRecord
	err := s.pool.QueryRow(ctx, `SELECT digest, principal, csrf, expires_ns, local FROM console_signins
		WHERE digest = $1 AND expires_ns > $2`, digest, nowNS).Scan(&r.Digest, &r.Principal, &r.CSRF, &r.Expires, &r.Local)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, store.ErrNotFound
	}
	return r, err
}

func (s signins) Delete(ctx context.Context, digest string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM console_signins WHERE digest = $1`, digest)
	return err
}
