package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/relay"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/stream/decode"
)

// relayBuffer is the size of each direction's copy buffer.
const relayBuffer = 64 << 10

// maxHeld bounds the bytes of one unfinished frame the server direction
// holds back: any SPDY frame (8-byte header, 24-bit length) fits, and so
// does every WebSocket frame the API server writes. A larger frame is
// relayed as it comes.
const maxHeld = 8 + 1<<24

// upstream is the API server side of an upgraded stream. conn is the
// connection under resp.Body (which hides it), for the half-close; nil when
// the transport did not report it.
type upstream struct {
	io.ReadWriteCloser
	conn net.Conn
}

// CloseWrite tells the API server the client's bytes ended. Without the
// connection, only a full close can say it.
func (u upstream) CloseWrite() error {
	if u.conn == nil {
		return u.Close()
	}
	return relay.CloseWrite(u.conn)
}

// relay runs both directions through the decoders (relay.Run): each one's
// end is passed on as a half-close, and both connections are closed once
// both directions are done, or at once when ctx ends (lock, kill, expiry,
// tunnel gone). It returns how the stream ended (audit.End…) and the error
// behind an abnormal end.
func (s *session) relay(ctx context.Context, up upstream, pair *decode.Pair) (string, error) {
	s.pair, s.up = pair, up
	client := relay.NetConn(s.x.stream, s.x.br)
	res := relay.Run(ctx, client, up, s.clientFlow, s.serverFlow)
	return s.endReason(ctx, res)
}

// endReason decides how the stream ended, from what the flows saw.
func (s *session) endReason(ctx context.Context, res relay.Result) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var re *recordError
	switch {
	case s.refused != nil && errors.As(s.refused, &re):
		return audit.EndRecordFailed, s.refused
	case s.refused != nil:
		return audit.EndDecodeFailed, s.refused
	case res.Ended:
		var ended *sessions.Ended
		if errors.As(context.Cause(ctx), &ended) {
			return string(ended.Reason), nil
		}
		return outsideEnd(ctx, audit.EndTunnelClosed), context.Cause(ctx)
	case s.serverEnd == audit.EndCompleted:
		return audit.EndCompleted, nil
	case s.clientEnded:
		return audit.EndClientClosed, nil
	case s.serverEnd != "":
		return s.serverEnd, s.serverErr
	}
	// The server direction ended on a failed write to the client.
	if res.BToA.WriteFailed {
		return audit.EndClientClosed, res.BToA.Err
	}
	return audit.EndError, errors.Join(res.AToB.Err, res.BToA.Err)
}

// refuse ends the stream because a decoder or the recording refused a
// chunk: the API server connection is closed, so the server direction
// ends and tells the client why.
func (s *session) refuse(err error) {
	s.mu.Lock()
	if s.refused == nil {
		s.refused = err
	}
	s.mu.Unlock()
	_ = s.up.Close()
}

// clientFlow copies the client's bytes to the API server, feeding every
// chunk to the client decoder first.
func (s *session) clientFlow(dst io.Writer, src io.Reader) error {
	dec := s.pair.Client
	buf := make([]byte, relayBuffer)
	for {
		nr, rerr := src.Read(buf)
		if nr > 0 {
			if _, err := dec.Write(buf[:nr]); err != nil {
				s.refuse(err)
				return err
			}
			if _, err := dst.Write(buf[:nr]); err != nil {
				return fmt.Errorf("write to the API server: %w", err)
			}
			s.in.Add(int64(nr))
		}
		if rerr != nil {
			s.mu.Lock()
			if s.serverEnd == "" {
				s.clientEnded = true
			}
			s.mu.Unlock()
			if err := dec.Close(); err != nil && rerr == io.EOF {
				s.x.h.Logger.Debug("client stream ended inside a frame", "session", s.x.adm.grant.SessionID, "err", err)
			}
			if rerr == io.EOF {
				return nil
			}
			return rerr
		}
	}
}

// serverFlow copies the API server's bytes to the client, feeding them to
// the server decoder (and through it the recording) first. It relays only
// whole frames and holds an unfinished one back, so the client's bytes
// always end at a frame boundary: if the API server's bytes stop before
// the command's exit status, Limen can end the stream there with a failure
// status the client reports, instead of a cut stream the client might take
// for success.
func (s *session) serverFlow(dst io.Writer, src io.Reader) error {
	dec := s.pair.Server
	buf := make([]byte, relayBuffer)
	n := 0 // bytes in buf, not yet relayed
	// Bytes given to the decoder, bytes relayed, and the end of the last
	// whole frame: relayed == boundary when the client is between frames.
	var written, relayed, boundary int64
	send := func(p []byte) error {
		if _, err := dst.Write(p); err != nil {
			// The client is gone: stop the API server too.
			_ = s.up.Close()
			return fmt.Errorf("write to the client: %w", err)
		}
		relayed += int64(len(p))
		s.out.Add(int64(len(p)))
		return nil
	}
	for {
		if n == len(buf) {
			if len(buf) < maxHeld {
				buf = append(buf, make([]byte, min(len(buf), maxHeld-len(buf)))...)
			} else {
				// One frame larger than maxHeld: relay it as it comes.
				if err := send(buf[:n]); err != nil {
					return err
				}
				n = 0
			}
		}
		nr, rerr := src.Read(buf[n:])
		if nr > 0 {
			if _, err := dec.Write(buf[n : n+nr]); err != nil {
				s.refuse(err)
				s.fail(dst, relayed == boundary, refusalMessage(err))
				return err
			}
			n += nr
			written += int64(nr)
			boundary = written - dec.Pending()
			if cut := boundary - relayed; cut > 0 {
				if err := send(buf[:cut]); err != nil {
					return err
				}
				n = copy(buf, buf[cut:n])
			}
		}
		if rerr != nil {
			return s.serverEnded(dst, rerr, relayed == boundary, n)
		}
	}
}

// serverEnded handles the end of the API server's bytes: rerr is io.EOF
// or the read error, atBoundary says the client's bytes end between
// frames, and held counts the bytes of an unfinished frame never relayed.
func (s *session) serverEnded(dst io.Writer, rerr error, atBoundary bool, held int) error {
	dec := s.pair.Server
	closeErr := dec.Close()
	exited := s.tap.exited()
	s.mu.Lock()
	refused := s.refused
	s.mu.Unlock()

	var end, why string
	switch {
	case refused != nil:
		s.fail(dst, atBoundary, refusalMessage(refused))
		return rerr
	case s.hasExit() && exited, !s.hasExit() && rerr == io.EOF && closeErr == nil:
		// exec and attach are complete once their exit status arrived (what
		// follows is only the connection's end); port-forward when its
		// bytes end between frames.
		end = audit.EndCompleted
	case rerr != io.EOF:
		end, why = audit.EndUpstreamReset, "the connection to the API server "+brokeHow(rerr)
	case held > 0 || closeErr != nil:
		end, why = audit.EndTruncated, "the API server's stream ended inside a frame"
	default:
		end, why = audit.EndTruncated, "the API server ended the stream"
	}
	var serverErr error
	if rerr != io.EOF {
		serverErr = fmt.Errorf("read from the API server: %w", rerr)
	} else if closeErr != nil {
		serverErr = closeErr
	}
	s.mu.Lock()
	s.serverEnd, s.serverErr = end, serverErr
	s.mu.Unlock()
	if end != audit.EndCompleted {
		s.fail(dst, atBoundary, "Limen: "+why+" before the command's exit status arrived; its output may be incomplete")
	}
	if rerr == io.EOF {
		return nil
	}
	return rerr
}

// fail ends the client's stream with a failure status carrying msg, if
// the client's bytes end between frames and the protocol has a place for
// it (exec and attach).
func (s *session) fail(dst io.Writer, atBoundary bool, msg string) {
	if !atBoundary || !s.hasExit() {
		return
	}
	if b := s.pair.Failure(msg); b != nil {
		_, _ = dst.Write(b)
	}
}

// hasExit reports whether the stream ends with an exit status (exec and
// attach; port-forward has none).
func (s *session) hasExit() bool { return s.login != string(sessions.KindPortForward) }

// refusalMessage tells the user why Limen ended the stream.
func refusalMessage(err error) string {
	var re *recordError
	if errors.As(err, &re) {
		return "Limen ended the session because it could not record it; ask your operator to check the worker's recording spool"
	}
	return "Limen ended the session because it could not decode the stream: " + err.Error()
}

// brokeHow words a read error from the API server for the user.
func brokeHow(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNRESET):
		return "was reset"
	case errors.Is(err, net.ErrClosed):
		return "was closed"
	}
	return "failed"
}
