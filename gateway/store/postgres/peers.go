package postgres

import (
	"context"
	"time"

	"github.com/limenhq/limen/gateway/store"
)

var peersMigrations = []store.Migration{
	{Version: 1, SQL: `CREATE TABLE limen_proxies (
	id   text PRIMARY KEY,
	addr text NOT NULL,
	seen timestamptz NOT NULL
)`},
}

// Heartbeat records p as alive now (store.PeerDirectory). Rows of proxies
// long gone are deleted here, by whichever proxy beats next, so the table
// holds about the live proxies and no job is needed to clean it.
func (b *Backend) Heartbeat(ctx context.Context, p store.PeerRecord) error {
	if _, err := b.pool.Exec(ctx, `INSERT INTO limen_proxies (id, addr, seen) VALUES ($1, $2, now())
		ON CONFLICT (id) DO UPDATE SET addr = excluded.addr, seen = excluded.seen`, p.ID, p.Addr); err != nil {
		return err
	}
	_, err := b.pool.Exec(ctx, `DELETE FROM limen_proxies WHERE seen < now() - interval '1 day'`)
	return err
}

// Live lists the proxies seen within ttl by the database's clock
// (store.PeerDirectory).
func (b *Backend) Live(ctx context.Context, ttl time.Duration) ([]store.PeerRecord, error) {
	rows, err := b.pool.Query(ctx, `SELECT id, addr FROM limen_proxies WHERE seen > now() - make_interval(secs => $1) ORDER BY id`,
		ttl.Seconds())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.PeerRecord
	for rows.Next() {
		var p store.PeerRecord
		if err := rows.Scan(&p.ID, &p.Addr); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}
