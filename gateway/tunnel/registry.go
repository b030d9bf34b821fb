package tunnel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
)

// add registers w. An older session of the same worker and link is
// closed: a worker that reconnects has lost its previous session, which
// would otherwise linger until its heartbeats time out and fail requests
// sent to it meanwhile. Sessions of the same worker on other links stay: a
// worker with a tunnel through the load balancer and one dialed directly
// may reach this proxy twice, and closing either would only make it dial
// again and close the other in turn.
func (s *Server) add(w *Worker, log *slog.Logger) {
	s.mu.Lock()
	if s.byCluster == nil {
		s.byCluster = make(map[string][]*Worker)
	}
	c := w.info.Cluster
	var stale []*Worker
	for _, x := range s.byCluster[c] {
		if x.info.WorkerID == w.info.WorkerID && x.info.Link == w.info.Link {
			stale = append(stale, x)
		}
	}
	s.byCluster[c] = append(s.byCluster[c], w)
	s.mu.Unlock()
	for _, x := range stale {
		log.Warn("tunnel: worker reconnected; closing its previous session", "previous", x.info.SessionID)
		_ = x.Close()
	}
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
// starting the scan at a rotating offset so ties spread round-robin. A
// draining worker is chosen only when no other is usable: it serves until
// its replacement connects.
func (s *Server) pick(cluster string, skip []*Worker) *Worker {
	s.mu.Lock()
	defer s.mu.Unlock()
	ws := s.byCluster[cluster]
	s.rr++
	var best *Worker
	bestN, bestDraining := 0, false
	for i := range ws {
		w := ws[(int(s.rr%uint64(len(ws)))+i)%len(ws)]
		if !w.usable() || slices.Contains(skip, w) {
			continue
		}
		n, draining := w.sess.NumStreams(), w.draining.Load()
		if best == nil || (bestDraining && !draining) || (draining == bestDraining && n < bestN) {
			best, bestN, bestDraining = w, n, draining
		}
	}
	return best
}

// Open opens a data stream to a connected worker of cluster. It returns an
// error wrapping ErrNoWorker when none is usable. ctx governs only the
// open; close the returned conn to end the stream. The open does not wait
// for the worker's acknowledgement; it blocks only when 256 opens are
// unacknowledged, and then for at most Timing.PeerTimeout, after which
// yamux drops the wedged session.
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
			s.opened.Add(1)
			return newStream(st, &w.traffic), nil
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

// RequestAll sends m to every registered worker of cluster (every worker
// when cluster is "") in parallel, as Broadcast does, and waits for each
// one's reply, which check judges. A worker that does not answer within
// ctx, or whose answer check refuses, is dropped: it cannot be trusted to
// hold the pushed state, and it gets the whole state when it reconnects.
// It returns once every worker has answered or been dropped.
func (s *Server) RequestAll(ctx context.Context, cluster string, m Message, check func(Message) error) error {
	ws := s.snapshot(cluster)
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() {
			reply, err := w.Request(ctx, m)
			if err == nil {
				err = check(reply)
			}
			if err != nil {
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

// Stats are traffic totals for metrics.
type Stats struct {
	// Workers is the number of registered worker sessions.
	Workers int
	// StreamsOpen is the number of data streams open now.
	StreamsOpen int
	// StreamsOpened counts data streams opened since the Server started.
	StreamsOpened uint64
	// BytesIn and BytesOut count data-stream bytes read from and written to
	// workers since the Server started.
	BytesIn, BytesOut uint64
}

// Stats returns current counts and running totals.
func (s *Server) Stats() Stats {
	st := Stats{
		StreamsOpened: s.opened.Load(),
		BytesIn:       s.traffic.in.Load(),
		BytesOut:      s.traffic.out.Load(),
	}
	for _, w := range s.snapshot("") {
		st.Workers++
		st.StreamsOpen += w.Info().Streams
	}
	return st
}
