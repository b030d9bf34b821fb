package tunnel

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
)

// Server is the proxy side of the tunnel: a registry of connected workers
// and the way to open request streams to them. The zero value is ready to
// use; set the hook fields before the first ServeConn. A Server must not be
// copied after first use.
type Server struct {
	// Logger receives connection events; nil discards them.
	Logger *slog.Logger
	// ID names this proxy process to the workers (HelloAck.ProxyID).
	ID string
	// Timing tunes heartbeats and timeouts.
	Timing Timing
	// OnConnect runs once per accepted worker, after the worker is
	// reachable by Broadcast and SendTo and before Open may choose it, so
	// pushing the current lock list here cannot race a lock change. A
	// non-nil error drops the session.
	OnConnect func(ctx context.Context, w *Worker) error
	// OnMessage receives caller-defined control messages from a worker, in
	// order. It runs on that worker's control loop and must not block long.
	OnMessage func(ctx context.Context, w *Worker, m Message)
	// OnDisconnect, if set, runs after a registered worker is removed.
	OnDisconnect func(info WorkerInfo, err error)
	// OnStream serves a stream the worker opened (Client.OpenStream), of
	// the kind its first frame names, in a goroutine of its own; the stream
	// is closed when it returns and ctx ends with the session. It must
	// close (return) for any kind it does not serve. Nil: every stream a
	// worker opens is closed unread.
	OnStream func(ctx context.Context, w *Worker, kind string, conn net.Conn)
	// MaxWorkerStreams bounds the streams one worker may have open toward
	// the proxy at once (0: DefaultMaxWorkerStreams); more are closed.
	MaxWorkerStreams int

	mu        sync.Mutex
	byCluster map[string][]*Worker
	rr        uint64
	traffic   counters
	opened    atomic.Uint64
}

// WorkerInfo describes one connected worker session.
type WorkerInfo struct {
	// SessionID names this connection; it changes on every reconnect.
	SessionID string
	Cluster   string
	WorkerID  string
	// Link is the worker's name for this tunnel among its tunnels
	// (Hello.Link).
	Link        string
	Version     string
	RemoteAddr  string
	ConnectedAt time.Time
	// Ready is false until OnConnect has returned.
	Ready bool
	// Draining is set once the worker said it is stopping (TypeDrain).
	Draining bool
	// Streams is the number of streams open now besides the control
	// stream: request streams and the worker's own (uploads).
	Streams int
	// Opened counts data streams opened over the session's life.
	Opened uint64
	// BytesIn and BytesOut count data-stream bytes read from and written
	// to the worker over the session's life.
	BytesIn, BytesOut uint64
}

// Worker is one connected worker session, handed to the hooks.
type Worker struct {
	info  WorkerInfo // immutable after registration
	sess  *yamux.Session
	ctrl  *control
	ready atomic.Bool
	// draining: the worker is stopping; it gets new streams only while
	// no other worker of its cluster is usable.
	draining atomic.Bool
	open     atomic.Uint64
	traffic  counters
}

// Info returns a snapshot of the worker's description and counters.
func (w *Worker) Info() WorkerInfo {
	i := w.info
	i.Ready, i.Draining = w.ready.Load(), w.draining.Load()
	i.Streams = max(w.sess.NumStreams()-1, 0) // minus the control stream
	i.Opened = w.open.Load()
	i.BytesIn, i.BytesOut = w.traffic.in.Load(), w.traffic.out.Load()
	return i
}

// Send writes m on the worker's control stream. A write that fails or is
// cut off by ctx drops the session, since the stream is then unusable.
func (w *Worker) Send(ctx context.Context, m Message) error {
	_, err := w.ctrl.send(ctx, m)
	return err
}

// Request sends m and waits for the worker's reply.
func (w *Worker) Request(ctx context.Context, m Message) (Message, error) {
	return w.ctrl.request(ctx, m)
}

// Close drops the worker's session; its open streams fail.
func (w *Worker) Close() error { return w.sess.Close() }

func (w *Worker) usable() bool { return w.ready.Load() && !w.sess.IsClosed() }

// ServeConn runs one worker connection until it drops or ctx ends. The
// caller has verified the worker's certificate and passes the cluster the
// certificate is bound to; a hello naming any other cluster is refused.
// conn is closed when ServeConn returns.
func (s *Server) ServeConn(ctx context.Context, conn *tls.Conn, cluster string) error {
	defer conn.Close()
	t := s.Timing.withDefaults()
	log := logger(s.Logger).With("remote", conn.RemoteAddr().String(), "cert_cluster", cluster)
	if err := checkTLS(ctx, conn, t); err != nil {
		return err
	}
	// Liveness is the control stream's job from here; drop any deadline
	// the listener set for the handshake.
	_ = conn.SetDeadline(time.Time{})
	sess, err := yamux.Client(newCoalescedConn(conn), yamuxConfig(t, log))
	if err != nil {
		return fmt.Errorf("yamux: %w", err)
	}
	defer sess.Close()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() { _ = sess.Close() })
	defer stop()

	w, err := s.handshake(ctx, sess, t, cluster, log)
	if err != nil {
		log.Warn("tunnel: worker refused", "err", err)
		return err
	}
	log = log.With("session", w.info.SessionID, "worker", w.info.WorkerID)
	s.add(w, log)
	log.Info("tunnel: worker connected", "version", w.info.Version)

	var wg sync.WaitGroup
	ctrlErr := make(chan error, 1)
	wg.Go(func() {
		ctrlErr <- w.ctrl.run(ctx, func(ctx context.Context, m Message) {
			if m.Type == TypeDrain {
				s.drain(ctx, w, m)
				return
			}
			if s.OnMessage != nil {
				s.OnMessage(ctx, w, m)
			}
		})
	})
	var streams sync.WaitGroup
	wg.Go(func() { s.acceptWorkerStreams(ctx, w, t, log, &streams) })
	wg.Go(func() { cancelOnClose(ctx, sess, cancel) })

	err = s.connected(ctx, w)
	if err == nil {
		<-sess.CloseChan()
		err = <-ctrlErr
	}
	s.remove(w)
	_ = sess.Close()
	cancel(nil)
	wg.Wait()
	streams.Wait()
	log.Info("tunnel: worker disconnected", "err", err)
	if s.OnDisconnect != nil {
		s.OnDisconnect(w.Info(), err)
	}
	return err
}

// connected runs OnConnect and then makes the worker eligible for Open.
func (s *Server) connected(ctx context.Context, w *Worker) error {
	if s.OnConnect != nil {
		if err := s.OnConnect(ctx, w); err != nil {
			return fmt.Errorf("on connect: %w", err)
		}
	}
	w.ready.Store(true)
	return nil
}

func checkTLS(ctx context.Context, conn *tls.Conn, t Timing) error {
	hctx, cancel := context.WithTimeout(ctx, t.Handshake)
	defer cancel()
	if err := conn.HandshakeContext(hctx); err != nil {
		return fmt.Errorf("tls handshake: %w", err)
	}
	st := conn.ConnectionState()
	if st.NegotiatedProtocol != ALPN {
		return fmt.Errorf("tunnel: ALPN %q, want %q", st.NegotiatedProtocol, ALPN)
	}
	if st.Version < tls.VersionTLS13 {
		return fmt.Errorf("tunnel: TLS version %#x below 1.3", st.Version)
	}
	return nil
}

// cancelOnClose ends ctx, which hooks and handlers hold, once the session
// is gone.
func cancelOnClose(ctx context.Context, sess *yamux.Session, cancel context.CancelCauseFunc) {
	select {
	case <-sess.CloseChan():
		cancel(errSessionEnded)
	case <-ctx.Done():
	}
}

// handshake opens the control stream and checks the worker's hello.
func (s *Server) handshake(ctx context.Context, sess *yamux.Session, t Timing, cluster string, log *slog.Logger) (*Worker, error) {
	hctx, cancel := context.WithTimeout(ctx, t.Handshake)
	defer cancel()
	st, err := sess.OpenStream()
	if err != nil {
		return nil, fmt.Errorf("open control stream: %w", err)
	}
	conn := newStream(st, nil)
	ctrl := newControl(conn, t, log, func() { _ = sess.Close() })
	_ = conn.SetReadDeadline(time.Now().Add(t.Handshake))
	hello, err := readHello(conn)
	if err == nil && hello.Cluster != cluster {
		err = fmt.Errorf("%w: hello cluster %q, certificate cluster %q", ErrRefused, hello.Cluster, cluster)
	}
	if err != nil {
		// Tell the worker why, so its log names the problem; best effort.
		if m, merr := NewMessage(TypeRefused, Refusal{Reason: err.Error()}); merr == nil {
			_, _ = ctrl.send(hctx, m)
		}
		return nil, err
	}
	w := &Worker{sess: sess, ctrl: ctrl, traffic: counters{parent: &s.traffic}, info: WorkerInfo{
		SessionID:   rand.Text(),
		Cluster:     cluster,
		WorkerID:    hello.WorkerID,
		Link:        hello.Link,
		Version:     hello.Version,
		RemoteAddr:  sess.RemoteAddr().String(),
		ConnectedAt: time.Now(),
	}}
	ack, err := NewMessage(TypeHelloAck, HelloAck{SessionID: w.info.SessionID, ProxyID: s.ID})
	if err != nil {
		return nil, err
	}
	if _, err := ctrl.send(hctx, ack); err != nil {
		return nil, err
	}
	return w, nil
}

func readHello(st net.Conn) (Hello, error) {
	b, err := ReadFrame(st, MaxFrameSize)
	if err != nil {
		return Hello{}, fmt.Errorf("read hello: %w", err)
	}
	m, err := decodeMessage(b)
	if err != nil {
		return Hello{}, fmt.Errorf("read hello: %w", err)
	}
	if m.Type != TypeHello {
		return Hello{}, fmt.Errorf("%w: got %q before hello", ErrBadMessage, m.Type)
	}
	var h Hello
	if err := m.Decode(&h); err != nil {
		return Hello{}, err
	}
	return h, h.validate()
}
