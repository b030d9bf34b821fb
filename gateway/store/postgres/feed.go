package postgres

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/limenhq/limen/gateway/store"
)

// store.LocksChannel is announced by the trigger of the locks schema's
// version 2; a listener re-reads the table (the table is the truth).

var _ store.Feed = (*Backend)(nil)

// Watch listens on channel on a connection of its own until ctx ends. It
// calls onConnect each time the connection is (re)established, listening
// already, so that a caller re-reads everything it may have missed, and
// onNotify with each payload; both run on Watch's goroutine. A lost
// connection is retried with jittered exponential backoff (100 ms to 5 s),
// so that proxies losing the database together do not return in step.
func (b *Backend) Watch(ctx context.Context, channel string, onConnect func(), onNotify func(payload string)) error {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := b.listen(ctx, channel, onConnect, onNotify)
		if ctx.Err() != nil {
			break
		}
		if err == nil {
			backoff = 100 * time.Millisecond
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	return ctx.Err()
}

// listen runs one connection: LISTEN, onConnect, then the notifications
// until the connection fails (its error) or ctx ends.
func (b *Backend) listen(ctx context.Context, channel string, onConnect func(), onNotify func(string)) error {
	conn, err := pgx.ConnectConfig(ctx, b.pool.Config().ConnConfig)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	onConnect()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		onNotify(n.Payload)
	}
}
