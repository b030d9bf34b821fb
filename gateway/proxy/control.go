package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/tunnel"
)

// The proxy's side of the control stream, one long-lived stream per worker
// tunnel (DESIGN.md §1): workers send session events, each answered; the
// proxy pushes the lock list on connect, and lock changes and kills as they
// happen. Recordings come on streams of their own (upload.go), so that no
// upload holds up this loop.

// workerConn is the proxy's end of one worker's control stream; the
// tunnel's *tunnel.Worker is one.
type workerConn interface {
	Info() tunnel.WorkerInfo
	Send(ctx context.Context, m tunnel.Message) error
	Request(ctx context.Context, m tunnel.Message) (tunnel.Message, error)
}

// workerRouter routes each control message from a worker to the feature
// that handles its type, and runs what each feature must push when a worker
// connects. Everything registers while the proxy is built, before any
// worker connects, so no lock is needed.
type workerRouter struct {
	log      *slog.Logger
	handlers map[string]func(ctx context.Context, w workerConn, m tunnel.Message)
	connects []func(ctx context.Context, w workerConn) error
	streams  map[string]func(ctx context.Context, w workerConn, conn net.Conn)
}

func newWorkerRouter(log *slog.Logger) *workerRouter {
	return &workerRouter{log: log, handlers: map[string]func(context.Context, workerConn, tunnel.Message){},
		streams: map[string]func(context.Context, workerConn, net.Conn){}}
}

// stream registers fn for the streams of kind a worker opens.
func (r *workerRouter) stream(kind string, fn func(ctx context.Context, w workerConn, conn net.Conn)) {
	r.streams[kind] = fn
}

// onStream is the tunnel server's OnStream; a kind no feature serves is
// closed.
func (r *workerRouter) onStream(ctx context.Context, w *tunnel.Worker, kind string, conn net.Conn) {
	fn, ok := r.streams[kind]
	if !ok {
		r.log.Warn("unknown stream kind from worker; closing it", "kind", kind, "cluster", w.Info().Cluster)
		return
	}
	fn(ctx, w, conn)
}

// handle registers fn for control messages of type typ.
func (r *workerRouter) handle(typ string, fn func(ctx context.Context, w workerConn, m tunnel.Message)) {
	r.handlers[typ] = fn
}

// connect registers fn to run when a worker connects, before it may serve
// requests; an error drops the worker.
func (r *workerRouter) connect(fn func(ctx context.Context, w workerConn) error) {
	r.connects = append(r.connects, fn)
}

// onMessage is the tunnel server's OnMessage.
func (r *workerRouter) onMessage(ctx context.Context, w *tunnel.Worker, m tunnel.Message) {
	r.route(ctx, w, m)
}

func (r *workerRouter) route(ctx context.Context, w workerConn, m tunnel.Message) {
	fn, ok := r.handlers[m.Type]
	if !ok {
		r.log.Warn("unknown control message from worker", "type", m.Type, "cluster", w.Info().Cluster)
		return
	}
	fn(ctx, w, m)
}

// onConnect is the tunnel server's OnConnect.
func (r *workerRouter) onConnect(ctx context.Context, w *tunnel.Worker) error {
	return r.connected(ctx, w)
}

func (r *workerRouter) connected(ctx context.Context, w workerConn) error {
	for _, fn := range r.connects {
		if err := fn(ctx, w); err != nil {
			return err
		}
	}
	return nil
}

// handleControl registers the proxy's features on the worker tunnels:
// session events into the audit store, recording uploads into the
// recording store, and the lock list pushed to each worker as it connects.
func (s *Server) handleControl() {
	s.control.handle(audit.MsgEvent, func(ctx context.Context, w workerConn, m tunnel.Message) {
		s.reply(ctx, w, m, audit.MsgEventAck, audit.EventAck{Error: s.storeWorkerEvent(ctx, w.Info().Cluster, m)})
	})
	s.control.stream(recstore.StreamKind, s.receiveRecording)
	// A worker serves nothing before it holds the current lock list.
	s.control.connect(s.pushLocks)
}

// storeWorkerEvent stores a session event sent by a worker of cluster and
// returns "" once it is durable, or why it was not stored. A worker reports
// only for its own cluster, and only session events (Kube.SessionEvent).
func (s *Server) storeWorkerEvent(ctx context.Context, cluster string, m tunnel.Message) string {
	var ev audit.Event
	if err := m.Decode(&ev); err != nil {
		return "malformed event: " + err.Error()
	}
	if err := s.Kube.SessionEvent(ctx, cluster, ev); err != nil {
		if errors.Is(err, ErrForeignEvent) {
			s.log.Warn("worker event refused", "cluster", cluster, "err", err)
		} else {
			s.log.Error("store session event", "type", ev.Type, "err", err)
		}
		return err.Error()
	}
	return ""
}

// pushLocks sends a newly connected worker the full lock list and waits
// for its acknowledgement.
func (s *Server) pushLocks(ctx context.Context, w workerConn) error {
	all, err := s.Locks.List(ctx, time.Now())
	if err != nil {
		return err
	}
	m, err := locks.ListMessage(all)
	if err != nil {
		return err
	}
	reply, err := w.Request(ctx, m)
	if err != nil {
		return fmt.Errorf("push locks to worker: %w", err)
	}
	return locks.CheckAck(reply)
}

// pushTimeout bounds how long a lock change or kill waits for the workers'
// acknowledgements.
const pushTimeout = 5 * time.Second

// push sends a control message to the workers of a cluster ("" for all)
// and returns once each has acknowledged it (check judges the reply), so
// that `limen lock`, `unlock` and `sessions kill` return only when both
// hops enforce the change. A worker that does not acknowledge within
// pushTimeout is dropped by the tunnel and gets the full lock list when it
// reconnects.
func (s *Server) push(ctx context.Context, cluster string, build func() (tunnel.Message, error), check func(tunnel.Message) error) {
	m, err := build()
	if err != nil {
		s.log.Error("build control message", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pushTimeout)
	defer cancel()
	start := time.Now()
	if err := s.Tunnel.RequestAll(ctx, cluster, m, check); err != nil {
		s.log.Warn("push to workers", "type", m.Type, "err", err)
		return
	}
	s.metrics.LockPush(ctx, time.Since(start))
}

func (s *Server) reply(ctx context.Context, w workerConn, m tunnel.Message, typ string, body any) {
	r, err := m.Reply(typ, body)
	if err == nil {
		err = w.Send(ctx, r)
	}
	if err != nil {
		s.log.Warn("reply to worker", "type", typ, "err", err)
	}
}

// shutdownHandoff bounds how long a stopping proxy waits for the workers to
// end its streams (endSessions) before it ends the rest itself.
const shutdownHandoff = 3 * time.Second

// endSessions ends the proxy's streams when it stops. Each worker is asked
// to end its side first, with reason shutdown: for exec and attach the
// worker can tell kubectl why between two frames, which the proxy, relaying
// bytes it does not frame, cannot. The proxy then ends what is left itself.
func (s *Server) endSessions() {
	var wg sync.WaitGroup
	for _, i := range s.Sessions.List() {
		if !i.Live() {
			continue
		}
		wg.Go(func() {
			s.push(context.Background(), i.Cluster, func() (tunnel.Message, error) { return sessions.ShutdownMessage(i.ID) },
				func(m tunnel.Message) error { _, err := sessions.CheckKillAck(m); return err })
		})
	}
	wg.Wait()
	deadline := time.Now().Add(shutdownHandoff)
	for time.Now().Before(deadline) && slices.ContainsFunc(s.Sessions.List(), sessions.Info.Live) {
		time.Sleep(20 * time.Millisecond)
	}
	s.Sessions.Close()
}
