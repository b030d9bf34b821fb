package tunnel

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Streams the worker opens toward the proxy (DESIGN.md §1): bulk transfers,
// such as a recording upload, that must not hold up the control stream. Each
// starts with one frame naming its kind (the same rules as a message type);
// what follows is the kind's own protocol.

// DefaultMaxWorkerStreams bounds the streams one worker may have open toward
// the proxy at once when Server.MaxWorkerStreams is zero.
const DefaultMaxWorkerStreams = 4

// OpenStream opens a stream of the given kind to the proxy on the current
// session and writes its kind frame. ctx bounds the open and that write; it
// returns an error wrapping ErrNotConnected when no session is up. Close the
// returned conn to end the stream; its Close is a half-close (CloseWrite).
func (c *Client) OpenStream(ctx context.Context, kind string) (net.Conn, error) {
	if err := validType(kind); err != nil {
		return nil, fmt.Errorf("stream kind: %w", err)
	}
	c.mu.Lock()
	sess := c.sess
	c.mu.Unlock()
	if sess == nil {
		return nil, ErrNotConnected
	}
	st, err := sess.OpenStream()
	if err != nil {
		return nil, fmt.Errorf("open %s stream: %w: %w", kind, ErrTunnelClosed, err)
	}
	conn := newStream(st, nil)
	dl, _ := ctx.Deadline()
	_ = conn.SetWriteDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetWriteDeadline(time.Now()) })
	err = WriteFrame(conn, []byte(kind))
	stop()
	_ = conn.SetWriteDeadline(time.Time{})
	if err != nil {
		_ = st.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("open %s stream: %w", kind, ctx.Err())
		}
		return nil, fmt.Errorf("open %s stream: %w", kind, err)
	}
	return conn, nil
}

// acceptWorkerStreams serves the streams worker w opens until its session
// ends: each reads its kind frame within Timing.Handshake and goes to
// OnStream in a goroutine of its own, tracked by handlers. Without OnStream,
// or past MaxWorkerStreams open at once, a stream is closed unread: an
// unaccepted stream would hold buffers, and a worker must not be able to
// make the proxy hold unbounded goroutines.
func (s *Server) acceptWorkerStreams(ctx context.Context, w *Worker, t Timing, log *slog.Logger, handlers *sync.WaitGroup) {
	limit := s.MaxWorkerStreams
	if limit <= 0 {
		limit = DefaultMaxWorkerStreams
	}
	slots := make(chan struct{}, limit)
	for {
		st, err := w.sess.AcceptStream()
		if err != nil {
			return
		}
		if s.OnStream == nil {
			log.Warn("tunnel: worker opened a stream; closing it")
			_ = st.Close()
			continue
		}
		select {
		case slots <- struct{}{}:
		default:
			log.Warn("tunnel: worker opened more streams than allowed at once; closing the new one", "max", limit)
			_ = st.Close()
			continue
		}
		handlers.Go(func() {
			conn := newStream(st, nil)
			defer conn.Close()
			// Freed before the close, so that a worker that sees its stream
			// end may open the next at once.
			defer func() { <-slots }()
			kind, err := readKind(conn, t.Handshake)
			if err != nil {
				log.Warn("tunnel: worker stream refused", "err", err)
				return
			}
			s.OnStream(ctx, w, kind, conn)
		})
	}
}

// readKind reads a worker stream's kind frame, waiting at most d.
func readKind(conn net.Conn, d time.Duration) (string, error) {
	_ = conn.SetReadDeadline(time.Now().Add(d))
	b, err := ReadFrame(conn, maxTypeLen)
	if err != nil {
		return "", fmt.Errorf("read stream kind: %w", err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	kind := string(b)
	if err := validType(kind); err != nil {
		return "", fmt.Errorf("stream kind: %w", err)
	}
	return kind, nil
}
