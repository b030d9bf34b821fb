package postgres

import (
	"context"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/limenhq/limen/gateway/store"
)

var exportMigrations = []store.Migration{
	{Version: 1, SQL: `CREATE TABLE limen_export_cursors (
	sink text PRIMARY KEY,
	seq  bigint NOT NULL
)`},
}

var (
	_ store.Leases        = (*Backend)(nil)
	_ store.ExportCursors = (*Backend)(nil)
)

// leaseClass is the first key of every lease's advisory lock, so that
// leases never collide with other advisory locks (migrateLock takes the
// one-key form).
const leaseClass = 0x4c494d45 // "LIME"

// leaseRetry is how often a waiting proxy tries for a lease, and
// leaseCheck how often the holder checks that its connection lives.
const (
	leaseRetry = 2 * time.Second
	leaseCheck = time.Second
)

// Hold takes a session-level advisory lock on a connection of its own: the
// lock lasts exactly as long as that connection, so a holder that dies
// (or is cut off) frees the lease for the next proxy, which tries every
// leaseRetry (jittered). While fn runs the connection is pinged every
// leaseCheck; a failed ping ends fn's context.
func (b *Backend) Hold(ctx context.Context, name string, fn func(ctx context.Context)) error {
	h := fnv.New32a()
	h.Write([]byte(name))
	key := int32(h.Sum32())
	for {
		conn, err := pgx.ConnectConfig(ctx, b.pool.Config().ConnConfig)
		if err == nil {
			var got bool
			if err = conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, $2)", int32(leaseClass), key).Scan(&got); err == nil && got {
				b.held(ctx, conn, fn)
				return ctx.Err()
			}
			conn.Close(context.Background())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(leaseRetry/2 + rand.N(leaseRetry)):
		}
	}
}

// held runs fn while conn, which holds the lease, answers; closing conn
// releases the lease.
func (b *Backend) held(ctx context.Context, conn *pgx.Conn, fn func(ctx context.Context)) {
	defer conn.Close(context.Background())
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); fn(lctx) }()
	t := time.NewTicker(leaseCheck)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			pctx, pcancel := context.WithTimeout(ctx, leaseCheck)
			err := conn.Ping(pctx)
			pcancel()
			if err != nil {
				cancel()
				<-done
				return
			}
		}
	}
}

// ExportCursor returns sink's stored cursor, 0 when there is none.
func (b *Backend) ExportCursor(ctx context.Context, sink string) (int64, error) {
	var seq int64
	err := b.pool.QueryRow(ctx, `SELECT seq FROM limen_export_cursors WHERE sink = $1`, sink).Scan(&seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return seq, err
}

// SetExportCursor stores sink's cursor, never moving it back (a holder
// that lost its lease late must not undo its successor's progress).
func (b *Backend) SetExportCursor(ctx context.Context, sink string, seq int64) error {
	_, err := b.pool.Exec(ctx, `INSERT INTO limen_export_cursors (sink, seq) VALUES ($1, $2)
		ON CONFLICT (sink) DO UPDATE SET seq = greatest(limen_export_cursors.seq, excluded.seq)`, sink, seq)
	return err
}
