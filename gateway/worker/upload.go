package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"time"

	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/gateway/tunnel"
)

// StreamOpener opens a stream of a kind to the proxy; the tunnel Client is
// one.
type StreamOpener interface {
	OpenStream(ctx context.Context, kind string) (net.Conn, error)
}

// Uploader moves committed recordings from the spool to the proxy's store,
// each on a tunnel stream of its own (recstore.StreamKind), never on the
// control stream, so that a large upload holds up no lock, kill or
// heartbeat. An upload cut off resumes where the proxy's copy ends; the
// proxy verifies the SHA-256 of the whole file, and the recording leaves the
// spool only once the proxy acknowledged the same SHA-256. Failed uploads
// are retried with backoff; the spool survives restarts, so nothing is lost.
type Uploader struct {
	Spool  *recording.Spool
	Tunnel StreamOpener
	// Connected, if set, says whether the tunnel is up; uploads wait for it.
	Connected func() bool
	Logger    *slog.Logger
	// MinBackoff and MaxBackoff bound the delay after a failure; Poll is
	// how often the spool is looked at without a Kick.
	MinBackoff, MaxBackoff, Poll time.Duration

	kick chan struct{}
	// retry holds the recordings whose last upload failed: each waits for
	// its own backoff, so that one failing recording never holds back the
	// others. Only Run's goroutine touches it.
	retry map[string]backoff
}

// backoff is when a failed recording is tried again, and the delay after
// its next failure.
type backoff struct {
	at    time.Time
	delay time.Duration
}

// NewUploader returns an Uploader with default timings.
func NewUploader(spool *recording.Spool, t StreamOpener, connected func() bool, log *slog.Logger) *Uploader {
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
	offline := u.MinBackoff
	for {
		wait := u.Poll
		switch err := u.pass(ctx); {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, errOffline):
			// Nothing can go until the tunnel is back: wait, kicked or not.
			wait, offline = jitter(offline), min(2*offline, u.MaxBackoff)
			if !sleepCtx(ctx, wait) {
				return ctx.Err()
			}
			continue
		case err != nil:
			u.Logger.Warn("recording spool not readable; will retry", "err", err)
		default:
			offline = u.MinBackoff
		}
		// A kick (a new recording) starts a pass at once; recordings that
		// failed wait for their own time.
		if next, ok := u.nextRetry(); ok {
			wait = min(wait, max(time.Until(next), 0))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-u.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// jitter returns a random duration in [d/2, d].
func jitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }

// nextRetry is the earliest time a failed recording is due again.
func (u *Uploader) nextRetry() (time.Time, bool) {
	var next time.Time
	for _, b := range u.retry {
		if next.IsZero() || b.at.Before(next) {
			next = b.at
		}
	}
	return next, !next.IsZero()
}

// pass uploads every pending recording that is due, oldest first. A
// recording that fails is logged and given its own backoff; the pass goes on
// with the next. Only a tunnel that is down (errOffline) or a spool that
// cannot be listed ends the pass.
func (u *Uploader) pass(ctx context.Context) error {
	items, err := u.Spool.Pending()
	if err != nil {
		return fmt.Errorf("list spool: %w", err)
	}
	if u.retry == nil {
		u.retry = map[string]backoff{}
	}
	pending := make(map[string]bool, len(items))
	for _, it := range items {
		pending[it.ID] = true
	}
	for id := range u.retry {
		if !pending[id] {
			delete(u.retry, id) // uploaded or removed meanwhile
		}
	}
	for _, it := range items {
		if b, failed := u.retry[it.ID]; failed && time.Now().Before(b.at) {
			continue
		}
		if u.Connected != nil && !u.Connected() {
			return errOffline
		}
		err := u.upload(ctx, it)
		switch {
		case errors.Is(err, errOffline) || ctx.Err() != nil:
			return errOffline
		case err != nil:
			b := u.retry[it.ID]
			b.delay = min(max(2*b.delay, u.MinBackoff), u.MaxBackoff)
			b.at = time.Now().Add(jitter(b.delay))
			u.retry[it.ID] = b
			u.Logger.Warn("recording upload failed; will retry", "session", it.ID, "err", err,
				"retry_in", time.Until(b.at).Round(time.Millisecond))
			continue
		}
		delete(u.retry, it.ID)
		u.Logger.Info("recording uploaded", "session", it.ID, "bytes", it.Size, "sha256", it.SHA256)
	}
	return nil
}

// upload sends one recording, from where the proxy's copy ends, and drops
// it from the spool once the proxy stored the same SHA-256.
func (u *Uploader) upload(ctx context.Context, it recording.Item) error {
	src, err := u.Spool.Open(it.ID)
	if err != nil {
		return err
	}
	defer src.Close()
	conn, err := u.Tunnel.OpenStream(ctx, recstore.StreamKind)
	if err != nil {
		return offline(err)
	}
	defer conn.Close()
	// Leaving ends the upload at once; the proxy keeps what came.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	r, err := recstore.Send(conn, recstore.Header{ID: it.ID, Size: it.Size, SHA256: it.SHA256}, src)
	switch {
	case err != nil:
		return offline(err)
	case r.Status == recstore.Refused:
		return fmt.Errorf("proxy: %s", r.Reason)
	case r.Status != recstore.Stored:
		return fmt.Errorf("proxy answered %s, want stored", r.Status)
	case r.SHA256 != it.SHA256:
		// Already stored (an earlier acknowledgement could not be acted
		// on), but not this recording: the spool copy is kept.
		return fmt.Errorf("the proxy stores this recording with sha256 %s, the spool has %s; the spool copy is kept", r.SHA256, it.SHA256)
	}
	return u.Spool.Ack(it.ID, r.SHA256)
}

// offline maps a tunnel that is down to errOffline, so that the pass waits
// for it instead of counting a failure.
func offline(err error) error {
	if errors.Is(err, tunnel.ErrNotConnected) || errors.Is(err, tunnel.ErrTunnelClosed) {
		return errOffline
	}
	return err
}
