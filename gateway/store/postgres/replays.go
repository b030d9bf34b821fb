package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/limenhq/limen/gateway/store"
)

var replaysMigrations = []store.Migration{
	{Version: 1, SQL: `CREATE TABLE limen_replays (
	key        text PRIMARY KEY,
	expires_ns bigint NOT NULL
);
CREATE INDEX limen_replays_expires ON limen_replays (expires_ns)`},
}

var _ store.ReplayLedger = (*Backend)(nil)

// UseOnce records key in one statement: a new key is inserted, an expired
// one taken over, a live one left alone and reported (no row returned).
// Keys are stored by their SHA-256, since a caller's key may hold bytes
// (NUL) that PostgreSQL text refuses. Expired rows are deleted on the way.
func (b *Backend) UseOnce(ctx context.Context, key string, expiresNS, nowNS int64) (bool, error) {
	sum := sha256.Sum256([]byte(key))
	if _, err := b.pool.Exec(ctx, `DELETE FROM limen_replays WHERE expires_ns <= $1`, nowNS); err != nil {
		return false, err
	}
	var got string
	err := b.pool.QueryRow(ctx, `INSERT INTO limen_replays (key, expires_ns) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET expires_ns = excluded.expires_ns WHERE limen_replays.expires_ns <= $3
		RETURNING key`, hex.EncodeToString(sum[:]), expiresNS, nowNS).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}
