package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/tunnel"
)

// The worker's side of the control stream (DESIGN.md §1): the proxy pushes
// the lock list, lock changes and kills, each acknowledged; the worker
// sends session events (EventRelay), each answered. Recordings do not
// travel here: each has a stream of its own (Uploader).

// Requester sends a control message and waits for the reply; the tunnel
// Client is one.
type Requester interface {
	Request(ctx context.Context, m tunnel.Message) (tunnel.Message, error)
}

// Sender sends a control message without waiting for a reply; the tunnel
// Client is one.
type Sender interface {
	Send(ctx context.Context, m tunnel.Message) error
}

// proxyRouter routes each control message from the proxy to the feature
// that handles its type. Everything registers before the tunnel starts, so
// no lock is needed.
type proxyRouter struct {
	log      *slog.Logger
	handlers map[string]func(ctx context.Context, m tunnel.Message)
}

func newProxyRouter(log *slog.Logger) *proxyRouter {
	return &proxyRouter{log: log, handlers: map[string]func(context.Context, tunnel.Message){}}
}

// handle registers fn for control messages of type typ.
func (r *proxyRouter) handle(typ string, fn func(ctx context.Context, m tunnel.Message)) {
	r.handlers[typ] = fn
}

// onMessage is the tunnel client's OnMessage.
func (r *proxyRouter) onMessage(ctx context.Context, m tunnel.Message) {
	fn, ok := r.handlers[m.Type]
	if !ok {
		r.log.Warn("unknown control message from proxy", "type", m.Type)
		return
	}
	fn(ctx, m)
}

// handleLocks keeps set, the worker's copy of the proxy's locks, current
// from the proxy's pushes, and ends the sessions in reg the proxy kills:
// every request is checked on this hop too, and a lock or kill ends this
// hop's streams. Each push is acknowledged on to.
func (r *proxyRouter) handleLocks(to Sender, set *locks.Set, reg *sessions.Registry) {
	answer := func(handle func(tunnel.Message) (tunnel.Message, error)) func(context.Context, tunnel.Message) {
		return func(ctx context.Context, m tunnel.Message) {
			reply, err := handle(m)
			if err != nil {
				r.log.Error("control message refused", "type", m.Type, "err", err)
			}
			// Replies leave the control loop so that it never waits on a send.
			go func() {
				if err := to.Send(ctx, reply); err != nil {
					r.log.Warn("reply to proxy", "type", reply.Type, "err", err)
				}
			}()
		}
	}
	for _, typ := range []string{locks.TypeList, locks.TypeSet, locks.TypeRemove} {
		r.handle(typ, answer(set.HandleMessage))
	}
	r.handle(sessions.TypeKill, answer(reg.HandleMessage))
}

// EventRelay delivers session events to the proxy's audit store over the
// control stream (audit.MsgEvent) and reports success only once the proxy
// acknowledged the event as stored. It is the Handler's Events. Run
// delivers again, in the background, each session.end the proxy did not
// store.
type EventRelay struct {
	Tunnel Requester
	// Retry is the wait between two attempts while the tunnel is down, and
	// between two deliveries of a session.end the proxy did not store;
	// 0 is DefaultEventRetry.
	Retry time.Duration

	laterOnce sync.Once
	later     chan tunnel.Message
}

// DefaultEventRetry is how often EventRelay retries while the tunnel
// reconnects.
const DefaultEventRetry = 250 * time.Millisecond

// maxLaterEvents bounds the session.end events waiting for the proxy's
// audit trail to take them again.
const maxLaterEvents = 4096

// Send delivers ev and waits for its acknowledgement, retrying while the
// tunnel is down or reconnecting, until ctx ends. Any other failure, and a
// proxy that answers that it did not store the event, is returned at once:
// the stream it belongs to must not start (or must end). A session.end the
// proxy did not store (its audit trail full or down) is also kept for Run
// to deliver once the trail takes it: its stream is over, but the trail
// must still say how it ended.
func (r *EventRelay) Send(ctx context.Context, ev audit.Event) error {
	m, err := tunnel.NewMessage(audit.MsgEvent, ev)
	if err != nil {
		return err
	}
	err = r.deliver(ctx, m)
	var refused *refusedEventError
	if errors.As(err, &refused) && ev.Type == audit.TypeSessionEnd {
		select {
		case r.laterQueue() <- m:
			return fmt.Errorf("%w; delivering it again in the background", err)
		default:
			return fmt.Errorf("%w; %d session.end events already wait for the audit trail, so this one is dropped", err, maxLaterEvents)
		}
	}
	return err
}

func (r *EventRelay) laterQueue() chan tunnel.Message {
	r.laterOnce.Do(func() { r.later = make(chan tunnel.Message, maxLaterEvents) })
	return r.later
}

// Run delivers the session.end events the proxy did not store, oldest
// first, each until it is stored, until ctx ends.
func (r *EventRelay) Run(ctx context.Context) {
	later := r.laterQueue()
	for {
		var m tunnel.Message
		select {
		case <-ctx.Done():
			return
		case m = <-later:
		}
		for r.deliver(ctx, m) != nil {
			t := time.NewTimer(r.retry())
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

func (r *EventRelay) retry() time.Duration {
	if r.Retry <= 0 {
		return DefaultEventRetry
	}
	return r.Retry
}

// deliver sends m once the tunnel is up and returns the proxy's answer.
func (r *EventRelay) deliver(ctx context.Context, m tunnel.Message) error {
	for {
		reply, err := r.Tunnel.Request(ctx, m)
		if err == nil {
			return checkEventAck(reply)
		}
		if !errors.Is(err, tunnel.ErrNotConnected) && !errors.Is(err, tunnel.ErrTunnelClosed) {
			return err
		}
		t := time.NewTimer(r.retry())
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("audit event not delivered: %w", err)
		case <-t.C:
		}
	}
}

// refusedEventError is the proxy's answer that it did not store an event.
type refusedEventError struct{ msg string }

func (e *refusedEventError) Error() string { return "proxy did not store the event: " + e.msg }

func checkEventAck(reply tunnel.Message) error {
	var ack audit.EventAck
	if err := reply.Decode(&ack); err != nil {
		return fmt.Errorf("audit ack: %w", err)
	}
	if ack.Error != "" {
		return &refusedEventError{ack.Error}
	}
	return nil
}
