package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/limenhq/limen/gateway/store"
)

// RequestsFile holds the access requests.
const RequestsFile = "requests.db"

var requestsMigrations = []store.Migration{
	{Version: 1, SQL: `CREATE TABLE IF NOT EXISTS access_requests (
		id TEXT PRIMARY KEY, requester TEXT NOT NULL, state TEXT NOT NULL,
		created INTEGER NOT NULL, expires INTEGER NOT NULL, data TEXT NOT NULL);
		CREATE INDEX IF NOT EXISTS access_requests_state ON access_requests (state, expires)`},
}

// Requests is the access-request driver over requests.db.
type Requests struct{ db *sql.DB }

// Requests opens DIR/requests.db.
func (b *Backend) Requests(ctx context.Context) (store.Requests, error) {
	s, err := OpenRequests(ctx, filepath.Join(b.dir, RequestsFile))
	if err == nil {
		b.track(s.Close)
	}
	return s, err
}

// OpenRequests opens (creating and migrating) the request file at path.
// An approval must survive a power cut as much as a lock does.
func OpenRequests(ctx context.Context, path string) (*Requests, error) {
	db, err := open(ctx, path, "requests", requestsMigrations, options{fullSync: true})
	if err != nil {
		return nil, fmt.Errorf("open access request store %s: %w", path, err)
	}
	return &Requests{db: db}, nil
}

func (s *Requests) Close() error { return s.db.Close() }

const requestColumns = `id, requester, state, created, expires, data`

func scanRequest(r scanner) (store.RequestRecord, error) {
	var q store.RequestRecord
	err := r.Scan(&q.ID, &q.Requester, &q.State, &q.Created, &q.Expires, &q.Data)
	return q, err
}

func (s *Requests) Insert(ctx context.Context, r store.RequestRecord) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO access_requests (`+requestColumns+`) VALUES (?, ?, ?, ?, ?, ?)`,
		r.ID, r.Requester, r.State, r.Created, r.Expires, r.Data)
	if isUnique(err) {
		return store.ErrExists
	}
	return err
}

func (s *Requests) Get(ctx context.Context, id string) (store.RequestRecord, error) {
	r, err := scanRequest(s.db.QueryRowContext(ctx, `SELECT `+requestColumns+` FROM access_requests WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return r, store.ErrNotFound
	}
	return r, err
}

func (s *Requests) Update(ctx context.Context, id string, fn func(*store.RequestRecord) error) error {
	tx, err := s.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock first
	if err != nil {
		return err
	}
	defer tx.Rollback()
	r, err := scanRequest(tx.QueryRowContext(ctx, `SELECT `+requestColumns+` FROM access_requests WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	if err != nil {
		return err
	}
	if err := fn(&r); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE access_requests SET requester = ?, state = ?, expires = ?, data = ? WHERE id = ?`,
		r.Requester, r.State, r.Expires, r.Data, id); err != nil {
		return err
	}
	return tx.Commit()
}

func (s *Requests) List(ctx context.Context, state string, expiresBefore int64, limit int) ([]store.RequestRecord, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+requestColumns+` FROM access_requests
		WHERE (? = '' OR state = ?) AND (? = 0 OR expires < ?) ORDER BY created DESC, id LIMIT ?`,
		state, state, expiresBefore, expiresBefore, max(limit, 1))
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
