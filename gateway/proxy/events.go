package proxy

import (
	"context"
	"errors"
	"fmt"

	"github.com/limenhq/limen/gateway/audit"
)

// ErrForeignEvent refuses an event a worker may not report on its control
// stream.
var ErrForeignEvent = errors.New("event refused")

// SessionEvent stores a session.start or session.end that a worker of
// cluster sent on its control stream, and returns nil once it is durable.
// The worker is the one hop that sees a stream whole (the recording, the
// exit code, how the API server ended it), so it reports each session's one
// start and one end; this proxy adds what only it knows. For a session it
// relays, the principal is the proxy's own, never the worker's claim, and a
// session.end is completed with the proxy's reason for ending it
// (sessions.Info.CompleteEnd): a lock, kill or expiry the proxy enforced
// first reaches the worker only as its client side closing.
func (k *Kube) SessionEvent(ctx context.Context, cluster string, ev audit.Event) error {
	if ev.Type != audit.TypeSessionStart && ev.Type != audit.TypeSessionEnd {
		return fmt.Errorf("%w: event type %q may not be sent on the control stream", ErrForeignEvent, ev.Type)
	}
	if ev.Cluster != cluster {
		return fmt.Errorf("%w: a worker of cluster %q may not report for cluster %q", ErrForeignEvent, cluster, ev.Cluster)
	}
	ev.ID = 0
	if k.Sessions != nil && ev.SessionID != "" {
		if info, ok := k.Sessions.Get(ev.SessionID); ok && info.Cluster == cluster {
			ev.Principal = info.Principal
			if ev.Type == audit.TypeSessionEnd && ev.Session != nil {
				end := *ev.Session
				info.CompleteEnd(&end)
				ev.Session = &end
			}
		}
	}
	return k.Audit.Emit(ctx, ev)
}
