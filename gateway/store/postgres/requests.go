package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/limenhq/limen/gateway/store"
)

var requestsMigrations = []store.Migration{
	{Version: 1, SQL: `CREATE TABLE access_requests (
	id        text PRIMARY KEY,
	requester text NOT NULL,
	state     text NOT NULL,
	created   bigint NOT NULL,
	expires   bigint NOT NULL,
	data      text NOT NULL
);
CREATE INDEX access_requests_state ON access_requests (state, expires)`},
}

type requests struct{ pool *pgxpool.Pool }

// Requests returns the access requests, shared by every proxy.
func (b *Backend) Requests(context.Context) (store.Requests, error) { return requests{b.pool}, nil }

func (requests) Close() error { return nil }

const requestColumns = `id, requester, state, created, expires, data`

func scanRequest(r pgx.Row) (store.RequestRecord, error) {
	var q store.RequestRecord
	err := r.Scan(&q.ID, &q.Requester, &q.State, &q.Created, &q.Expires, &q.Data)
	return q, err
}

func (s requests) Insert(ctx context.Context, r store.RequestRecord) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO access_requests (`+requestColumns+`) VALUES ($1, $2, $3, $4, $5, $6)`,
		r.ID, r.Requester, r.State, r.Created, r.Expires, r.Data)
	if pgCode(err) == uniqueViolation {
		return store.ErrExists
	}
	return err
}

func (s requests) Get(ctx context.Context, id string) (store.RequestRecord, error) {
	r, err := scanRequest(s.pool.QueryRow(ctx, `SELECT `+requestColumns+` FROM access_requests WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, store.ErrNotFound
	}
	return r, err
}

func (s requests) Update(ctx context.Context, id string, fn func(*store.RequestRecord) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// FOR UPDATE: two approvers of one request queue here, so that
		// the second sees the first's approval.
		r, err := scanRequest(tx.QueryRow(ctx, `SELECT `+requestColumns+` FROM access_requests WHERE id = $1 FOR UPDATE`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if err := fn(&r); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE access_requests SET requester = $1, state = $2, expires = $3, data = $4 WHERE id = $5`,
			r.Requester, r.State, r.Expires, r.Data, id)
		return err
	})
}

func (s requests) List(ctx context.Context, state string, expiresBefore int64, limit int) ([]store.RequestRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+requestColumns+` FROM access_requests
		WHERE ($1::text = '' OR state = $1::text) AND ($2::bigint = 0 OR expires < $2::bigint) ORDER BY created DESC, id LIMIT $3`,
		state, expiresBefore, max(limit, 1))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.RequestRecord
	for rows.Next() {
		r, err := scanRequest(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
