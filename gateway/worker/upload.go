package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/gateway/tunnel"
)

// Requester sends a control message and waits for the reply; the tunnel
// Client is one.
type Requester interface {
	Request(ctx context.Context, m tunnel.Message) (tunnel.Message, error)
}

// Uploader moves committed recordings from the spool to the proxy's store,
// chunk by chunk over the control stream, and drops each from the spool only
// after the proxy confirmed the SHA-256 it stored. Failed uploads are
// retried with backoff; the spool survives restarts, so nothing is lost.
type Uploader struct {
	Spool  *recording.Spool
	Tunnel Requester
	// Connected, if set, says whether the tunnel is up; uploads wait for it.
	Connected func() bool
	Logger    *slog.Logger
	// MinBackoff and MaxBackoff bound the delay after a failure; Poll is
	// how often the spool is looked at without a Kick.
	MinBackoff, MaxBackoff, Poll time.Duration

	kick chan struct{}
}

// NewUploader returns an Uploader with default timings.
func NewUploader(spool *recording.Spool, t Requester, connected func() bool, log *slog.Logger) *Uploader {
	return &Uploader{Spool: spool, Tunnel: t, Connected: connected, Logger: log,
		MinBackoff: 500 * time.Millisecond, MaxBackoff: 30 * time.Second, Poll: 5 * time.Second,
		kick: make(chan struct{}, 1)}
}

// Kick asks for an upload pass now (a recording was committed).
func (u *Uploader) Kick() {
	select {
	case u.kick <- struct{}{}:
	default:
	}
}

// errOffline means the tunnel is down; the pass waits without logging.
var errOffline = errors.New("tunnel not connected")

// Run uploads until ctx ends and returns ctx's error.
func (u *Uploader) Run(ctx context.Context) error {
	delay := u.MinBackoff
	for {
		err := u.pass(ctx)
		wait := u.Poll
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil:
			delay = u.MinBackoff
		default:
			if !errors.Is(err, errOffline) {
				u.Logger.Warn("recording upload failed; will retry", "err", err, "retry_in", delay)
			}
			wait = delay/2 + rand.N(delay/2+1)
			delay = min(2*delay, u.MaxBackoff)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-u.kick:
			if err != nil {
				// Keep backing off after a failure even when kicked.
				select {
				case <-ctx.Done():
					t.Stop()
					return ctx.Err()
				case <-t.C:
				}
			}
		case <-t.C:
		}
		t.Stop()
	}
}

// pass uploads every pending recording, oldest first.
func (u *Uploader) pass(ctx context.Context) error {
	items, err := u.Spool.Pending()
	if err != nil {
		return fmt.Errorf("list spool: %w", err)
	}
	for _, it := range items {
		if u.Connected != nil && !u.Connected() {
			return errOffline
		}
		if err := u.upload(ctx, it); err != nil {
			return fmt.Errorf("upload recording %s: %w", it.ID, err)
		}
		u.Logger.Info("recording uploaded", "session", it.ID, "bytes", it.Size, "sha256", it.SHA256)
	}
	return nil
}

// upload sends one recording from offset 0 and acknowledges it in the spool
// once the proxy stored the same SHA-256.
func (u *Uploader) upload(ctx context.Context, it recording.Item) error {
	r, err := u.Spool.Open(it.ID)
	if err != nil {
		return err
	}
	defer r.Close()
	buf := make([]byte, recstore.MaxChunk)
	var off int64
	for {
		n, rerr := io.ReadFull(r, buf)
		if rerr != nil && rerr != io.EOF && rerr != io.ErrUnexpectedEOF {
			return fmt.Errorf("read spool: %w", rerr)
		}
		c := recstore.Chunk{ID: it.ID, Offset: off, Data: buf[:n]}
		if off+int64(n) >= it.Size {
			c.Final, c.Size, c.SHA256 = true, it.Size, it.SHA256
		}
		ack, err := u.send(ctx, c)
		if err != nil {
			return err
		}
		off += int64(n)
		if c.Final {
			if ack.SHA256 != it.SHA256 {
				return fmt.Errorf("proxy stored sha256 %q, spool has %s", ack.SHA256, it.SHA256)
			}
			return u.Spool.Ack(it.ID, ack.SHA256)
		}
		if n == 0 {
			return fmt.Errorf("spool file shorter than its %d bytes", it.Size)
		}
	}
}

func (u *Uploader) send(ctx context.Context, c recstore.Chunk) (recstore.Ack, error) {
	m, err := tunnel.NewMessage(recstore.MsgChunk, c)
	if err != nil {
		return recstore.Ack{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, eventTimeout)
	defer cancel()
	reply, err := u.Tunnel.Request(ctx, m)
	if err != nil {
		if errors.Is(err, tunnel.ErrNotConnected) || errors.Is(err, tunnel.ErrTunnelClosed) {
			return recstore.Ack{}, errOffline
		}
		return recstore.Ack{}, err
	}
	var ack recstore.Ack
	if reply.Type != recstore.MsgAck {
		return ack, fmt.Errorf("proxy answered %q, want %s", reply.Type, recstore.MsgAck)
	}
	if err := reply.Decode(&ack); err != nil {
		return ack, fmt.Errorf("decode ack: %w", err)
	}
	if ack.Error != "" {
		return ack, fmt.Errorf("proxy: %s", ack.Error)
	}
	return ack, nil
}
