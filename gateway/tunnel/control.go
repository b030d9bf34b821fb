package tunnel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// control is one side of the control stream. Writes are serialized through
// sendSem; reads happen only in run. A failed or interrupted write leaves a
// partial frame on the stream, so it closes the whole session (via onBroken).
type control struct {
	conn     net.Conn
	timing   Timing
	log      *slog.Logger
	onBroken func()

	sendSem chan struct{}
	nextID  atomic.Uint64

	mu      sync.Mutex
	pending map[uint64]chan Message
	done    chan struct{} // closed when run returns
	doneErr error
}

func newControl(conn net.Conn, t Timing, log *slog.Logger, onBroken func()) *control {
	return &control{
		conn:     conn,
		timing:   t,
		log:      log,
		onBroken: onBroken,
		sendSem:  make(chan struct{}, 1),
		pending:  make(map[uint64]chan Message),
		done:     make(chan struct{}),
	}
}

// send writes one message and returns the ID it was given. ctx bounds the
// wait for the stream and the write; cancelling it mid-write breaks the
// session.
func (c *control) send(ctx context.Context, m Message) (uint64, error) {
	return c.write(ctx, m, nil)
}

// write assigns m its ID, lets onID see it before any byte is written (so a
// reply cannot outrun its registration), and writes the frame.
func (c *control) write(ctx context.Context, m Message, onID func(uint64)) (uint64, error) {
	select {
	case c.sendSem <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-c.done:
		return 0, c.closedErr()
	}
	defer func() { <-c.sendSem }()
	select {
	case <-c.done:
		return 0, c.closedErr()
	default:
	}
	m.ID = c.nextID.Add(1)
	payload, err := encodeMessage(m)
	if err != nil {
		return 0, err
	}
	if onID != nil {
		onID(m.ID)
	}
	dl, _ := ctx.Deadline() // zero when none: no deadline
	_ = c.conn.SetWriteDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetWriteDeadline(time.Now()) })
	err = WriteFrame(c.conn, payload)
	stop()
	if err != nil {
		// Part of the frame may be out: the stream, and so the session, is
		// unusable either way.
		c.onBroken()
		if ctx.Err() != nil {
			return 0, fmt.Errorf("send %s: %w", m.Type, ctx.Err())
		}
		return 0, fmt.Errorf("send %s: %w: %w", m.Type, ErrTunnelClosed, err)
	}
	return m.ID, nil
}

// request sends m and waits for the message whose ReplyTo is its ID.
func (c *control) request(ctx context.Context, m Message) (Message, error) {
	ch := make(chan Message, 1)
	var id uint64
	register := func(n uint64) {
		id = n
		c.mu.Lock()
		c.pending[n] = ch
		c.mu.Unlock()
	}
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()
	if _, err := c.write(ctx, m, register); err != nil {
		return Message{}, err
	}
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		return Message{}, ctx.Err()
	case <-c.done:
		return Message{}, c.closedErr()
	}
}

func (c *control) closedErr() error {
	if c.doneErr != nil {
		return fmt.Errorf("%w: %v", ErrTunnelClosed, c.doneErr)
	}
	return ErrTunnelClosed
}

// readMessage reads one message, failing if the peer stays silent past
// PeerTimeout.
func (c *control) readMessage() (Message, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(c.timing.PeerTimeout))
	b, err := ReadFrame(c.conn, MaxFrameSize)
	if err != nil {
		return Message{}, err
	}
	return decodeMessage(b)
}

// run reads messages until the stream fails or ctx ends, answering nothing
// itself: heartbeats only refresh the deadline, replies complete requests,
// and everything else goes to onMessage in order. It also sends heartbeats.
// It returns why the stream ended and closes c.done.
func (c *control) run(ctx context.Context, onMessage func(context.Context, Message)) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { c.heartbeat(ctx) })
	err := c.readLoop(ctx, onMessage)
	cancel()
	c.onBroken()
	wg.Wait()
	c.doneErr = err
	close(c.done)
	return err
}

func (c *control) readLoop(ctx context.Context, onMessage func(context.Context, Message)) error {
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetReadDeadline(time.Now()) })
	defer stop()
	for {
		m, err := c.readMessage()
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			if isTimeout(err) {
				return fmt.Errorf("peer silent for %s: %w", c.timing.PeerTimeout, err)
			}
			return fmt.Errorf("read control: %w", err)
		}
		switch {
		case m.Type == TypeHeartbeat:
		case m.ReplyTo != 0:
			c.mu.Lock()
			ch := c.pending[m.ReplyTo]
			c.mu.Unlock()
			if ch != nil {
				select {
				case ch <- m:
				default:
				}
			} else {
				c.log.Debug("tunnel: unsolicited reply", "type", m.Type, "reply_to", m.ReplyTo)
			}
		case onMessage != nil:
			onMessage(ctx, m)
		default:
			c.log.Debug("tunnel: control message ignored", "type", m.Type)
		}
	}
}

func (c *control) heartbeat(ctx context.Context) {
	t := time.NewTicker(c.timing.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		hctx, cancel := context.WithTimeout(ctx, c.timing.PeerTimeout)
		_, err := c.send(hctx, Message{Type: TypeHeartbeat})
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("tunnel: heartbeat failed", "err", err)
			}
			return
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
