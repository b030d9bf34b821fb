package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/tunnel"
)

// observePoll is how often a live view looks for new output in the
// recording. The spool has each event in the file before it is relayed;
// polling bounds the reads of a busy session's file.
const observePoll = 100 * time.Millisecond

// observeSettle bounds how long, after its session ended, a live view waits
// for the recording to be committed before it sends what it has and ends.
const observeSettle = 5 * time.Second

// handleConsole answers the console's requests: the live view of a session
// this worker holds (sessions.TypeObserve), and this worker's policy status
// (policy.TypeStatusQuery). Neither touches the request path: the live view
// reads the recording the session writes anyway.
func (r *proxyRouter) handleConsole(t StreamOpener, to Sender, spool *recording.Spool, reg *sessions.Registry, pol *policy.Engine) {
	r.handle(sessions.TypeObserve, func(ctx context.Context, m tunnel.Message) {
		var o sessions.Observe
		if err := m.Decode(&o); err != nil || o.Validate() != nil {
			r.log.Warn("malformed observe request from proxy", "err", errors.Join(err, o.Validate()))
			return
		}
		info, ok := reg.Get(o.ID)
		if !ok || !info.Live() {
			return // another worker's session, or over: nothing to send
		}
		go observe(ctx, r.log, t, spool, reg, o)
	})
	r.handle(policy.TypeStatusQuery, func(ctx context.Context, m tunnel.Message) {
		// A message of its own, not a reply: the proxy asks with a
		// broadcast and collects the reports as they come.
		reply, err := tunnel.NewMessage(policy.TypeStatusReport, pol.Status())
		if err != nil {
			r.log.Error("policy status report", "err", err)
			return
		}
		go func() {
			if err := to.Send(ctx, reply); err != nil {
				r.log.Warn("send policy status to proxy", "err", err)
			}
		}()
	})
}

// observe streams session o.ID's recording to the proxy as it is written,
// until the session has ended and the recording is complete.
func observe(ctx context.Context, log *slog.Logger, t StreamOpener, spool *recording.Spool, reg *sessions.Registry, o sessions.Observe) {
	tail, err := spool.Follow(o.ID)
	if err != nil {
		log.Warn("live view: recording not found", "session", o.ID, "err", err)
		return
	}
	defer tail.Close()
	conn, err := t.OpenStream(ctx, sessions.ObserveStreamKind)
	if err != nil {
		log.Warn("live view: open stream to proxy", "session", o.ID, "err", err)
		return
	}
	defer conn.Close()
	head, _ := json.Marshal(o)
	if _, err := conn.Write(append(head, '\n')); err != nil {
		return
	}
	// The proxy closes its side when the watcher goes away.
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		var b [1]byte
		_, _ = conn.Read(b[:])
	}()
	var settle time.Time
	tick := time.NewTicker(observePoll)
	defer tick.Stop()
	for {
		lines, err := tail.Next()
		if len(lines) > 0 {
			if _, werr := writeAll(conn, lines); werr != nil {
				return
			}
		}
		if err != nil {
			log.Warn("live view: read recording", "session", o.ID, "err", err)
			return
		}
		info, ok := reg.Get(o.ID)
		if !ok || !info.Live() {
			// Ended: wait for the recording's last block to be written.
			if settle.IsZero() {
				settle = time.Now().Add(observeSettle)
			}
			if !tail.Writing() || time.Now().After(settle) {
				lines, _ := tail.Next()
				_, _ = writeAll(conn, lines)
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-gone:
			return
		case <-tick.C:
		}
	}
}

func writeAll(c net.Conn, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	return c.Write(b)
}
