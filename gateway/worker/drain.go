package worker

import (
	"context"
	"time"
)

// DefaultShutdownTimeout bounds a worker's drain. The Helm chart gives the
// pod 5 s more than this before the kubelet kills it.
const DefaultShutdownTimeout = 25 * time.Second

// DefaultHandover is how long a stopping worker waits, at most, for another
// worker of its cluster to take new streams: in a rolling update the
// replacement starts before the old pod is told to stop, and is usually
// connected within a second.
const DefaultHandover = 5 * time.Second

// drainPoll is how often the drain looks again at a state it waits for.
const drainPoll = 50 * time.Millisecond

// drain stops the worker without losing what it saw, within timeout:
//
//  1. Hand over: tell the proxy (tunnel.Client.Drain), which sends new
//     streams elsewhere as soon as another worker of the cluster is
//     connected, and wait for one for up to handover. Until then this
//     worker serves everything as before.
//  2. End every stream (exec, attach, port-forward, watch, logs) with
//     reason shutdown. Each commits its recording and has its session.end
//     stored at the proxy before its handler returns. Plain requests
//     already under way run to their end.
//  3. Wait for every handler to return.
//  4. Upload every recording still in the spool.
//
// What the timeout cuts short is logged; recordings never leave the spool
// unless the proxy has them, so a worker whose data directory persists
// sends the rest when it starts again.
func (s *Server) drain(timeout, handover time.Duration) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s.log.Info("worker stopping: handing new streams over, then ending this worker's sessions",
		"shutdown_timeout", timeout, "handover", handover)
	others := s.handOver(ctx, handover)
	streams := 0
	for _, i := range s.Sessions.List() {
		if i.Live() {
			streams++
		}
	}
	s.Sessions.Close() // ends the streams with reason shutdown; plain requests go on
	// The requests get two thirds of what is left; the uploads the rest,
	// though they run all along.
	left := time.Until(start.Add(timeout))
	cut := s.Handler.waitIdle(ctx, 2*left/3)
	recordings := s.uploader.Flush(ctx)
	log := s.log.With("took", time.Since(start).Round(time.Millisecond), "others", others,
		"streams_ended", streams, "requests_cut", cut, "recordings_left", recordings)
	if cut > 0 || recordings != 0 {
		log.Warn("worker drain cut short by the shutdown timeout: requests cut off and recordings left in the spool "+
			"(they go to the proxy when the worker starts again with the same data directory)", "shutdown_timeout", timeout)
	} else {
		log.Info("worker drained: every session ended and audited, every recording at the proxy")
	}
}

// handOver tells the proxy this worker is stopping, and waits up to
// budget for another worker of the cluster to take new streams. It
// returns how many do.
func (s *Server) handOver(ctx context.Context, budget time.Duration) int {
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	for {
		ack, err := s.Tunnel.Drain(ctx)
		if err == nil && ack.Others > 0 {
			return ack.Others
		}
		if err != nil && ctx.Err() == nil {
			s.log.Debug("drain not acknowledged yet", "err", err)
		}
		if !sleepCtx(ctx, drainPoll*2) {
			return 0
		}
	}
}

// waitIdle waits until no request stream is being served, for at most
// budget or until ctx ends, and returns how many still are.
func (h *Handler) waitIdle(ctx context.Context, budget time.Duration) int {
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	for {
		n := int(h.active.Load())
		if n == 0 || !sleepCtx(ctx, drainPoll) {
			return n
		}
	}
}

// Flush waits until every committed recording in the spool has reached the
// proxy, or ctx ends, and returns how many are left (-1 if the spool
// cannot be read). Run does the uploading: Flush kicks it and watches.
func (u *Uploader) Flush(ctx context.Context) int {
	for {
		items, err := u.Spool.Pending()
		if err != nil {
			u.Logger.Error("recording spool not readable at shutdown", "err", err)
			return -1
		}
		if len(items) == 0 {
			return 0
		}
		u.Kick()
		if !sleepCtx(ctx, drainPoll) {
			return len(items)
		}
	}
}

// sleepCtx waits d, and reports false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
