package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/relay"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/stream"
	"github.com/limenhq/limen/gateway/stream/decode"
	"github.com/limenhq/limen/gateway/tunnel"
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
	s.pair, s.up, s.ended, s.atBoundary = pair, up, ctx, true
	if s.x.keepStream != nil {
		s.x.keepStream() // if already closed, the relay ends at once
	}
	client := relay.NetConn(s.x.stream, s.x.br)
	// An end from outside first tells the client why (tellEnd), then
	// closes both connections.
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		s.tellEnd(s.x.stream, context.Cause(ctx))
		cancel()
	})
	defer stop()
	res := relay.Run(rctx, client, up, s.clientFlow, s.serverFlow)
	return s.endReason(ctx, res)
}

// tellEndTimeout bounds the write of the status that tells a client why
// Limen ended its stream: a client that reads nothing must not delay the
// end.
const tellEndTimeout = 500 * time.Millisecond

// tellEnd gives the client of an exec or attach that Limen ends from
// outside — this worker shutting down, a kill, a lock, the grant's expiry —
// a failure status that says why, so kubectl prints the reason instead of
// a broken connection. Only between frames and before the command's exit
// status; nothing is written after it.
func (s *session) tellEnd(client net.Conn, cause error) {
	var ended *sessions.Ended
	if !s.hasExit() || s.tap.exited() || !errors.As(cause, &ended) {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.told {
		return
	}
	s.told = true
	if !s.atBoundary {
		return
	}
	if b := s.pair.Failure("Limen: " + ended.Error()); b != nil {
		_ = client.SetWriteDeadline(time.Now().Add(tellEndTimeout))
		_, _ = client.Write(b)
	}
}

// endReason decides how the stream ended, from what the flows saw.
func (s *session) endReason(ctx context.Context, res relay.Result) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.refused != nil && !(s.refusedLate && res.Ended):
		reason, _ := refusedEnd(s.refused)
		return reason, s.refused
	case res.Ended:
		var ended *sessions.Ended
		if errors.As(context.Cause(ctx), &ended) {
			return string(ended.Reason), nil
		}
		return outsideEnd(ctx, audit.EndTunnelClosed), context.Cause(ctx)
	case s.serverEnd == audit.EndCompleted:
		return audit.EndCompleted, nil
	case s.clientEnded && errors.Is(s.clientErr, tunnel.ErrTunnelClosed):
		return audit.EndProxyLost, s.clientErr
	case s.clientEnded:
		return audit.EndClientClosed, nil
	case s.serverEnd != "":
		return s.serverEnd, s.serverErr
	}
	// The server direction ended on a failed write to the client.
	if res.BToA.WriteFailed {
		return clientEnd(res.BToA.Err), res.BToA.Err
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
		s.refusedLate = s.ended != nil && s.ended.Err() != nil
	}
	s.mu.Unlock()
	_ = s.up.Close()
	// The stream is over: the client's direction drains what the client
	// still sends (relay.Run) only for refusedDrain, time for it to read
	// why, so that a client that never hangs up cannot keep it open.
	_ = s.x.stream.SetReadDeadline(time.Now().Add(refusedDrain))
}

// isRefused reports whether the stream was refused (refuse).
func (s *session) isRefused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused != nil
}

// errRefused ends the server direction of a refused stream.
var errRefused = errors.New("the stream was refused")

// refusedDrain is how long a refused stream still reads its client.
const refusedDrain = 2 * time.Second

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
				s.clientEnded, s.clientErr = true, rerr
			}
			s.mu.Unlock()
			if err := dec.Close(); err != nil && rerr == io.EOF {
				s.x.h.Logger.Debug("client stream ended inside a frame", "session", s.x.adm.req.SessionID, "err", err)
			}
			if rerr == io.EOF {
				return nil
			}
			return rerr
		}
	}
}

// serverFlow copies the API server's bytes to the client, feeding them to
// the server decoder (and through it the recording) first.
//
// The API server is read as fast as it sends, into a backlog, whatever the
// pace of the recording and the user: the kubelet and the API server close
// a finished stream at once, and output still queued in their sockets then
// is discarded by their kernel when any byte reaches them before it is
// sent — kubectl's and the API server's 5-second heartbeats do. Output the
// worker has read is safe.
//
// It relays only whole frames and holds an unfinished one back, so the
// client's bytes always end at a frame boundary: if the API server's bytes
// stop before the command's exit status, Limen can end the stream there
// with a failure status the client reports, instead of a cut stream the
// client might take for success.
func (s *session) serverFlow(dst io.Writer, up io.Reader) error {
	src, stop := s.readAhead(up)
	defer stop()
	return s.relayFrames(dst, src)
}

// readAhead drains up into a new backlog from a goroutine. stop ends that
// goroutine, closing the API server connection if its output is still
// coming (it is no longer wanted) or could not be held.
func (s *session) readAhead(up io.Reader) (*relay.Backlog, func()) {
	src := s.x.h.Backlog.open()
	filled := make(chan error, 1)
	go func() { filled <- relay.Fill(src, up) }()
	return src, func() {
		if !src.Ended() {
			_ = s.up.Close() // Fill then returns
		}
		_ = src.Close()
		if err := <-filled; err != nil {
			_ = s.up.Close()
		}
		if p := src.Peak(); p > DefaultBacklogMemory {
			s.x.h.Logger.Debug("stream read ahead of the user", "session", s.x.adm.req.SessionID, "peak_bytes", p)
		}
	}
}

// relayFrames is serverFlow's copy: whole frames only, through the decoder.
func (s *session) relayFrames(dst io.Writer, src io.Reader) error {
	dec := s.pair.Server
	buf := make([]byte, relayBuffer)
	n := 0 // bytes in buf, not yet relayed
	// Bytes given to the decoder, bytes relayed, and the end of the last
	// whole frame: relayed == boundary when the client is between frames.
	var written, relayed, boundary int64
	send := func(p []byte) error {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		if s.told {
			// Limen told the client the stream ended: stop the API server.
			_ = s.up.Close()
			return errTold
		}
		if _, err := dst.Write(p); err != nil {
			// The client is gone: stop the API server too.
			_ = s.up.Close()
			return fmt.Errorf("write to the client: %w", err)
		}
		relayed += int64(len(p))
		s.atBoundary = relayed == boundary
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
		if nr > 0 && s.isRefused() {
			// What the API server sends once the stream is refused (its
			// answer to the worker's close, as TLS closes) is not relayed:
			// the client gets the refusal, never a clean end.
			return s.serverEnded(dst, errRefused, relayed == boundary, n)
		}
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

	if refused == nil && errors.Is(rerr, relay.ErrBacklog) {
		// The worker could not hold the output it read ahead (disk full):
		// the stream cannot go on without losing bytes.
		refused = rerr
		s.refuse(rerr)
	}
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
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.told {
		return
	}
	s.told = true
	if b := s.pair.Failure(msg); b != nil {
		_, _ = dst.Write(b)
	}
}

// errTold ends the relay of a stream whose client was told it ended.
var errTold = errors.New("the client was told the stream ended")

// open returns a new stream backlog.
func (b Backlog) open() *relay.Backlog {
	memory, limit := b.Memory, b.Max
	if memory <= 0 {
		memory = DefaultBacklogMemory
	}
	if limit <= 0 {
		limit = DefaultBacklogMax
	}
	return relay.NewBacklog(b.Dir, memory, limit)
}

// hasExit reports whether the stream ends with an exit status (exec and
// attach; port-forward has none).
func (s *session) hasExit() bool { return s.login != string(sessions.KindPortForward) }

// refusedEnd says how a stream Limen refused ends: the session.end reason
// and the words the user gets, from one classification of err.
func refusedEnd(err error) (reason, msg string) {
	var ce *recording.CapError
	var re *recordError
	var full *recording.SpoolFullError
	switch {
	case errors.As(err, &full):
		return audit.EndRecordFailed, spoolFullMessage(full, "ended the session, since it could record no more of it")
	case errors.As(err, &ce):
		return audit.EndRecordingCap, fmt.Sprintf("Limen ended the session: its recording reached the worker's cap of %s (recording-max-bytes), "+
			"so nothing past that point was shown; ask your operator if sessions need more", recording.FormatBytes(ce.Max))
	case errors.As(err, &re):
		return audit.EndRecordFailed, "Limen ended the session because it could not record it; ask your operator to check the worker's recording spool"
	case errors.Is(err, relay.ErrBacklog):
		return audit.EndError, "Limen ended the session because the worker could not hold the command's output; ask your operator to check the worker's data directory"
	}
	return audit.EndDecodeFailed, "Limen ended the session because it could not decode the stream: " + err.Error()
}

// refusalMessage tells the user why Limen ended the stream.
func refusalMessage(err error) string {
	_, msg := refusedEnd(err)
	return msg
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

// upgrade relays a 101 response for the session opened before the request
// went upstream: it picks the decoders for the agreed protocol, then writes
// the kube.request event and relays both directions through the decoders.
// A protocol it cannot decode ends the session and answers the request
// instead.
func (x *exchange) upgrade(ctx context.Context, resp *http.Response, s *session, ev audit.Event) {
	h := x.h
	body, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		s.finish(ctx, audit.EndError, fmt.Errorf("the API server switched protocols without a connection"))
		x.refuseUpgrade(ev, http.StatusBadGateway, "the API server switched protocols without a connection")
		return
	}
	up := upstream{ReadWriteCloser: body, conn: x.conn.get()}
	pair, err := decode.ForResponse(resp.Header, s.tap)
	if err != nil {
		h.Logger.Warn("undecodable stream refused", "session", x.adm.req.SessionID, "err", err)
		_ = up.Close()
		s.finish(ctx, audit.EndDecodeFailed, err)
		x.refuseUpgrade(ev, http.StatusBadGateway, "Limen cannot decode the protocol the API server chose, so it ends the stream: "+err.Error())
		return
	}
	s.relayed = true
	if err := audit.WriteEvent(x.stream, ev); err != nil {
		s.finish(ctx, audit.EndTunnelClosed, fmt.Errorf("write kube.request to the proxy: %w", err))
		return
	}
	if err := writeHead(x.stream, resp, -1, true); err != nil {
		s.finish(ctx, audit.EndTunnelClosed, fmt.Errorf("write the 101 response to the proxy: %w", err))
		return
	}
	reason, err := s.relay(ctx, up, pair)
	s.finish(ctx, reason, err)
}

// refuseUpgrade answers an upgrade the worker will not relay, after its
// audit event, which keeps the API server's status: the user is told code,
// the audit what happened upstream.
func (x *exchange) refuseUpgrade(ev audit.Event, code int, msg string) {
	if err := audit.WriteEvent(x.stream, ev); err != nil {
		return
	}
	_ = writeStatusResponse(x.stream, code, "", msg)
}

// tap is the stream.Handler both decoders report to: it forwards to the
// recording (exec, attach) and keeps what session.end reports.
type tap struct {
	rec *recording.Writer

	mu    sync.Mutex
	ports map[string]bool
	// seen are the ports of frames already noted in ports, so that a frame
	// of a known port costs a map lookup, not a string allocation.
	seen map[uint16]bool
	exit *int
}

func (t *tap) next() stream.Handler {
	if t.rec == nil {
		return stream.NopHandler{}
	}
	return recorder{t.rec}
}

// recorder marks the recording's errors, so that session.end can tell a
// recording failure from a stream that could not be decoded. It holds the
// Writer itself, a pointer, so making it a stream.Handler for each chunk of
// output allocates nothing.
type recorder struct{ h *recording.Writer }

func (r recorder) Stdin(n int) error                     { return recordErr(r.h.Stdin(n)) }
func (r recorder) Stdout(p []byte) error                 { return recordErr(r.h.Stdout(p)) }
func (r recorder) Stderr(p []byte) error                 { return recordErr(r.h.Stderr(p)) }
func (r recorder) Resize(ts stream.TermSize) error       { return recordErr(r.h.Resize(ts)) }
func (r recorder) Exit(st stream.ExitStatus) error       { return recordErr(r.h.Exit(st)) }
func (r recorder) Close(dir stream.Direction) error      { return recordErr(r.h.Close(dir)) }
func (r recorder) PortError(port uint16, m string) error { return recordErr(r.h.PortError(port, m)) }
func (r recorder) CloseChannel(dir stream.Direction, ch int) error {
	return recordErr(r.h.CloseChannel(dir, ch))
}
func (r recorder) PortData(port uint16, dir stream.Direction, n int) error {
	return recordErr(r.h.PortData(port, dir, n))
}

// recordError is a failure to write the recording.
type recordError struct{ err error }

func (e *recordError) Error() string { return "recording: " + e.err.Error() }
func (e *recordError) Unwrap() error { return e.err }

func recordErr(err error) error {
	if err == nil {
		return nil
	}
	return &recordError{err}
}

func (t *tap) summary() ([]string, *int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ports []string
	for p := range t.ports {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	return ports, t.exit
}

func (t *tap) port(p uint16) {
	t.mu.Lock()
	if !t.seen[p] {
		if t.seen == nil {
			t.seen = map[uint16]bool{}
		}
		t.seen[p] = true
		t.ports[strconv.Itoa(int(p))] = true
	}
	t.mu.Unlock()
}

// Stdin is counted by the relay and never recorded.
func (t *tap) Stdin(n int) error { return t.next().Stdin(n) }

// Stdout records output.
func (t *tap) Stdout(p []byte) error { return t.next().Stdout(p) }

// Stderr records error output.
func (t *tap) Stderr(p []byte) error { return t.next().Stderr(p) }

// Resize records a terminal size.
func (t *tap) Resize(ts stream.TermSize) error { return t.next().Resize(ts) }

// Exit keeps and records the exit status.
func (t *tap) Exit(st stream.ExitStatus) error {
	t.mu.Lock()
	code := st.Code
	t.exit = &code
	t.mu.Unlock()
	return t.next().Exit(st)
}

// exited reports whether the exit status was seen.
func (t *tap) exited() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.exit != nil
}

// CloseChannel passes the v5 close signal on.
func (t *tap) CloseChannel(dir stream.Direction, ch int) error {
	return t.next().CloseChannel(dir, ch)
}

// PortData notes a forwarded port.
func (t *tap) PortData(port uint16, dir stream.Direction, n int) error {
	t.port(port)
	return t.next().PortData(port, dir, n)
}

// PortError notes a forwarded port.
func (t *tap) PortError(port uint16, msg string) error {
	t.port(port)
	return t.next().PortError(port, msg)
}

// Close passes the peer's close on.
func (t *tap) Close(dir stream.Direction) error { return t.next().Close(dir) }

var _ stream.Handler = (*tap)(nil)
