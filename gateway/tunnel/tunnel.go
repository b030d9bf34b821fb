// Package tunnel is the reverse tunnel between a Limen worker and the proxy.
//
// The worker dials the proxy over TLS 1.3 (ALPN "limen-tunnel/1") and the two
// sides run one yamux session over that connection. The proxy opens the
// first stream, the long-lived control stream (hello, heartbeats, and
// caller-defined messages such as lock and kill pushes), and one stream per
// HTTP request toward the worker. The worker opens streams only for bulk
// transfers toward the proxy (a recording upload), each starting with a
// frame that names its kind; the proxy serves the kinds it knows (OnStream)
// and closes any other. Bulk bytes thus never travel on the control stream,
// which stays free for locks, kills and heartbeats.
//
// The worker side is Client; the proxy side is Server.
package tunnel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
)

// ALPN is the TLS application protocol that selects the tunnel on the proxy port.
const ALPN = "limen-tunnel/1"

// Sentinel errors callers map to behaviour.
var (
	// ErrNoWorker means no worker for the cluster is connected; the proxy answers 503.
	ErrNoWorker = errors.New("tunnel: no worker connected for cluster")
	// ErrNotConnected means the worker has no live session to the proxy.
	ErrNotConnected = errors.New("tunnel: not connected")
	// ErrTunnelClosed means the tunnel under a stream or control call went away.
	ErrTunnelClosed = errors.New("tunnel: closed")
	// ErrRefused means the proxy refused the worker's hello.
	ErrRefused = errors.New("tunnel: refused by proxy")
)

// errSessionEnded is the cancellation cause of contexts tied to a session.
var errSessionEnded = fmt.Errorf("%w: session ended", ErrTunnelClosed)

// Defaults for Timing fields left zero.
const (
	DefaultHeartbeat       = 10 * time.Second
	DefaultPeerTimeout     = 30 * time.Second
	DefaultHandshake       = 10 * time.Second
	DefaultMaxStreamWindow = 4 << 20
)

// Timing tunes liveness on either side. Zero fields take the defaults.
type Timing struct {
	// Heartbeat is how often this side sends a heartbeat on the control stream.
	Heartbeat time.Duration
	// PeerTimeout is how long the control stream may stay silent before the
	// peer is declared dead and the session closed. It should be a few
	// Heartbeats of the peer.
	PeerTimeout time.Duration
	// Handshake bounds the TLS handshake and the hello exchange.
	Handshake time.Duration
	// MaxStreamWindow is yamux's per-stream receive window in bytes. It caps
	// how much one stream can buffer and, with the round trip time, its
	// throughput (window / RTT).
	MaxStreamWindow uint32
}

func (t Timing) withDefaults() Timing {
	if t.Heartbeat <= 0 {
		t.Heartbeat = DefaultHeartbeat
	}
	if t.PeerTimeout <= 0 {
		t.PeerTimeout = DefaultPeerTimeout
	}
	if t.Handshake <= 0 {
		t.Handshake = DefaultHandshake
	}
	if t.MaxStreamWindow == 0 {
		t.MaxStreamWindow = DefaultMaxStreamWindow
	}
	return t
}

// yamuxConfig builds the session configuration shared by both sides.
func yamuxConfig(t Timing, log *slog.Logger) *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.AcceptBacklog = 256
	cfg.EnableKeepAlive = true
	// yamux's own ping catches a dead TCP path even if the control loop is
	// busy in a hook; its write timeout bounds a stuck peer.
	cfg.KeepAliveInterval = t.Heartbeat
	cfg.ConnectionWriteTimeout = t.PeerTimeout
	cfg.StreamOpenTimeout = t.PeerTimeout
	if t.MaxStreamWindow > cfg.MaxStreamWindowSize {
		cfg.MaxStreamWindowSize = t.MaxStreamWindow
	}
	cfg.LogOutput = nil
	cfg.Logger = yamuxLogger{log: log}
	return cfg
}

// yamuxLogger adapts slog to the log.Logger-shaped interface yamux wants.
// yamux prefixes its lines with "[ERR]", "[WARN]" or "[DEBUG]"; the prefix
// picks the slog level.
type yamuxLogger struct{ log *slog.Logger }

func (l yamuxLogger) Print(v ...any)                 { l.emit(fmt.Sprint(v...)) }
func (l yamuxLogger) Printf(format string, v ...any) { l.emit(fmt.Sprintf(format, v...)) }
func (l yamuxLogger) Println(v ...any)               { l.emit(fmt.Sprintln(v...)) }

func (l yamuxLogger) emit(s string) {
	s = strings.TrimSpace(s)
	level := slog.LevelInfo
	switch {
	case strings.HasPrefix(s, "[ERR]"):
		level, s = slog.LevelWarn, strings.TrimSpace(strings.TrimPrefix(s, "[ERR]"))
	case strings.HasPrefix(s, "[WARN]"):
		level, s = slog.LevelWarn, strings.TrimSpace(strings.TrimPrefix(s, "[WARN]"))
	case strings.HasPrefix(s, "[DEBUG]"):
		level, s = slog.LevelDebug, strings.TrimSpace(strings.TrimPrefix(s, "[DEBUG]"))
	}
	l.log.Log(context.Background(), level, s, "component", "yamux")
}

func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// stream wraps a yamux stream so that the end of a stream caused by the
// session dying reads as ErrTunnelClosed instead of a clean io.EOF: a
// port-forward or exec relay must not mistake a dropped tunnel for the
// remote side finishing.
type stream struct {
	*yamux.Stream
	traffic *counters // nil: not counted
}

func newStream(st *yamux.Stream, traffic *counters) stream {
	return stream{Stream: st, traffic: traffic}
}

// Read reads what the peer sent. An idle stream holds no receive buffer:
// Limen's yamux (third_party/yamux) gives a stream's pooled chunks back as
// soon as its reader has emptied them.
func (s stream) Read(p []byte) (int, error) {
	n, err := s.Stream.Read(p)
	s.traffic.add(n, 0)
	return n, s.mapErr(err)
}

// Waker is a tunnel stream that can say when its peer has something for
// it (data, or the end of the stream or of the tunnel) without a goroutine
// parked in Read: OnWake runs f, in a goroutine of its own, the first time
// a Read parked on the stream would have been woken (the stream closed here
// wakes one too), or at once if a Read would not block now; the returned
// stop unsets f and reports whether f had not run. f reads as the parked
// Read would have: a tunnel that died reads as ErrTunnelClosed.
type Waker interface {
	OnWake(f func()) (stop func() bool)
}

var _ Waker = stream{}

func (s stream) Write(p []byte) (int, error) {
	n, err := s.Stream.Write(p)
	s.traffic.add(0, n)
	return n, s.mapErr(err)
}

func (s stream) mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF):
		if s.Session().IsClosed() {
			// Deliberately not wrapping io.EOF: callers must not see a clean end.
			return fmt.Errorf("%w: session ended", ErrTunnelClosed)
		}
		return err
	case errors.Is(err, yamux.ErrTimeout):
		// net.Conn promises deadline errors wrap os.ErrDeadlineExceeded.
		return os.ErrDeadlineExceeded
	case errors.Is(err, yamux.ErrSessionShutdown), errors.Is(err, yamux.ErrConnectionWriteTimeout),
		s.Session().IsClosed():
		return fmt.Errorf("%w: %w", ErrTunnelClosed, err)
	}
	return err
}

// CloseWrite half-closes the stream: the peer reads io.EOF, and this side
// can still read. yamux's Close is already a half-close (it sends FIN and
// keeps receiving until the peer's FIN or a timeout).
func (s stream) CloseWrite() error { return s.Stream.Close() }

var _ net.Conn = stream{}

// counters total the bytes through data streams; every add also reaches
// the parent, so a worker's traffic rolls up into the server's.
type counters struct {
	in, out atomic.Uint64
	parent  *counters
}

func (c *counters) add(in, out int) {
	for ; c != nil && in+out > 0; c = c.parent {
		c.in.Add(uint64(in))
		c.out.Add(uint64(out))
	}
}
