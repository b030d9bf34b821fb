package main

import (
	"context"
	"log/slog"

	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/tunnel"
	"github.com/limenhq/limen/gateway/worker"
)

// workerLocks gives the worker its own copy of the proxy's locks and a
// session registry, kept current by the proxy's pushes: every request is
// checked on this hop too, and a lock or kill ends this hop's streams.
func workerLocks(h *worker.Handler, hooks *proxyHooks, client func() *tunnel.Client, log *slog.Logger) *sessions.Registry {
	set := locks.NewSet()
	reg := sessions.New(sessions.Config{Locks: set, Logger: log.With("component", "sessions")})
	h.Locks, h.Sessions = set, reg
	reply := func(ctx context.Context, m tunnel.Message, handle func(tunnel.Message) (tunnel.Message, error)) {
		r, err := handle(m)
		if err != nil {
			log.Error("control message refused", "type", m.Type, "err", err)
		}
		// Replies leave the control loop so that it never waits on a send.
		go func() {
			if err := client().Send(ctx, r); err != nil {
				log.Warn("reply to proxy", "type", r.Type, "err", err)
			}
		}()
	}
	for _, typ := range []string{locks.TypeList, locks.TypeSet, locks.TypeRemove} {
		hooks.handle(typ, func(ctx context.Context, m tunnel.Message) { reply(ctx, m, set.HandleMessage) })
	}
	hooks.handle(sessions.TypeKill, func(ctx context.Context, m tunnel.Message) { reply(ctx, m, reg.HandleMessage) })
	return reg
}
