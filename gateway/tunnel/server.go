package tunnel

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
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

	mu        sync.Mutex
	byCluster map[string][]*Worker
	rr        uint64
}

// WorkerInfo describes one connected worker session.
type WorkerInfo struct {
	// SessionID names this connection; it changes on every reconnect.
	SessionID   string
	Cluster     string
	WorkerID    string
	Version     string
	RemoteAddr  string
	ConnectedAt time.Time
	// Ready is false until OnConnect has returned.
	Ready bool
	// Streams is the number of data streams open now.
	Streams int
	// Opened counts data streams opened over the session's life.
	Opened uint64
}

// Worker is one connected worker session, handed to the hooks.
type Worker struct {
	info  WorkerInfo // immutable after registration
	sess  *yamux.Session
	ctrl  *control
	ready atomic.Bool
	open  atomic.Uint64
}

// Info returns a snapshot of the worker's description and counters.
func (w *Worker) Info() WorkerInfo {
	i := w.info
	i.Ready = w.ready.Load()
	i.Streams = max(w.sess.NumStreams()-1, 0) // minus the control stream
	i.Opened = w.open.Load()
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
	sess, err := yamux.Client(conn, yamuxConfig(t, log))
	if err != nil {
		return fmt.Errorf("yamux: %w", err)
	}
	defer sess.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = sess.Close() })
	defer stop()

	w, err := s.handshake(ctx, sess, t, cluster, log)
	if err != nil {
		log.Warn("tunnel: worker refused", "err", err)
		return err
	}
	log = log.With("session", w.info.SessionID, "worker", w.info.WorkerID)
	s.add(w)
	log.Info("tunnel: worker connected", "version", w.info.Version)

	var wg sync.WaitGroup
	ctrlErr := make(chan error, 1)
	wg.Go(func() {
		ctrlErr <- w.ctrl.run(ctx, func(ctx context.Context, m Message) {
			if s.OnMessage != nil {
				s.OnMessage(ctx, w, m)
			}
		})
	})
	wg.Go(func() { refuseStreams(sess, log) })
	wg.Go(func() { cancelOnClose(ctx, sess, cancel) })

	err = s.connected(ctx, w)
	if err == nil {
		<-sess.CloseChan()
		err = <-ctrlErr
	}
	s.remove(w)
	_ = sess.Close()
	cancel()
	wg.Wait()
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
func cancelOnClose(ctx context.Context, sess *yamux.Session, cancel context.CancelFunc) {
	select {
	case <-sess.CloseChan():
		cancel()
	case <-ctx.Done():
	}
}

// refuseStreams closes any stream the worker tries to open: streams are
// opened by the proxy only, and an unaccepted stream would hold buffers.
func refuseStreams(sess *yamux.Session, log *slog.Logger) {
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		log.Warn("tunnel: worker opened a stream; closing it")
		_ = st.Close()
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
	conn := stream{st}
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
	w := &Worker{sess: sess, ctrl: ctrl, info: WorkerInfo{
		SessionID:   rand.Text(),
		Cluster:     cluster,
		WorkerID:    hello.WorkerID,
		Version:     hello.Version,
		RemoteAddr:  sess.RemoteAddr().String(),
		ConnectedAt: time.Now(),
	}}
	ack, err := NewMessage(TypeHelloAck, HelloAck{SessionID: w.info.SessionID})
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

func (s *Server) add(w *Worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byCluster == nil {
		s.byCluster = make(map[string][]*Worker)
	}
	s.byCluster[w.info.Cluster] = append(s.byCluster[w.info.Cluster], w)
}

func (s *Server) remove(w *Worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := w.info.Cluster
	s.byCluster[c] = slices.DeleteFunc(s.byCluster[c], func(x *Worker) bool { return x == w })
	if len(s.byCluster[c]) == 0 {
		delete(s.byCluster, c)
	}
}

// pick chooses the usable worker of cluster with the fewest open streams,
// starting the scan at a rotating offset so ties spread round-robin.
func (s *Server) pick(cluster string, skip []*Worker) *Worker {
	s.mu.Lock()
	defer s.mu.Unlock()
	ws := s.byCluster[cluster]
	s.rr++
	var best *Worker
	bestN := 0
	for i := range ws {
		w := ws[(int(s.rr%uint64(len(ws)))+i)%len(ws)]
		if !w.usable() || slices.Contains(skip, w) {
			continue
		}
		if n := w.sess.NumStreams(); best == nil || n < bestN {
			best, bestN = w, n
		}
	}
	return best
}

// Open opens a data stream to a connected worker of cluster. It returns an
// error wrapping ErrNoWorker when none is usable. ctx governs only the
// open; close the returned conn to end the stream.
func (s *Server) Open(ctx context.Context, cluster string) (net.Conn, error) {
	var failed []*Worker
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		w := s.pick(cluster, failed)
		if w == nil {
			return nil, fmt.Errorf("%w: %q", ErrNoWorker, cluster)
		}
		st, err := w.sess.OpenStream()
		if err == nil {
			w.open.Add(1)
			return stream{st}, nil
		}
		// The session died between pick and open; try another worker.
		logger(s.Logger).Debug("tunnel: open failed", "session", w.info.SessionID, "err", err)
		failed = append(failed, w)
	}
}

// Connected reports whether a usable worker for cluster is connected.
func (s *Server) Connected(cluster string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.byCluster[cluster], (*Worker).usable)
}

// Workers lists the registered worker sessions, by cluster then worker id.
func (s *Server) Workers() []WorkerInfo {
	var out []WorkerInfo
	for _, w := range s.snapshot("") {
		out = append(out, w.Info())
	}
	slices.SortFunc(out, func(a, b WorkerInfo) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.WorkerID, b.WorkerID),
			cmp.Compare(a.SessionID, b.SessionID))
	})
	return out
}

// snapshot returns the registered workers of cluster, or of every cluster
// when cluster is "".
func (s *Server) snapshot(cluster string) []*Worker {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cluster != "" {
		return slices.Clone(s.byCluster[cluster])
	}
	var out []*Worker
	for _, ws := range s.byCluster {
		out = append(out, ws...)
	}
	return out
}

// Broadcast sends m to every registered worker of cluster, or to every
// worker when cluster is "", in parallel, and returns once each send has
// finished. Workers still in OnConnect are included. A worker whose send
// fails is dropped (it can no longer be trusted to hold the pushed state);
// the failures are joined in the error.
func (s *Server) Broadcast(ctx context.Context, cluster string, m Message) error {
	ws := s.snapshot(cluster)
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() {
			if err := w.Send(ctx, m); err != nil {
				_ = w.Close()
				errs[i] = fmt.Errorf("worker %s (%s): %w", w.info.WorkerID, w.info.SessionID, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// SendTo sends m to the worker session with the given SessionID.
func (s *Server) SendTo(ctx context.Context, sessionID string, m Message) error {
	for _, w := range s.snapshot("") {
		if w.info.SessionID == sessionID {
			return w.Send(ctx, m)
		}
	}
	return fmt.Errorf("%w: session %q", ErrNoWorker, sessionID)
}
