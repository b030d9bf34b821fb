package main

import (
	"context"
	"log/slog"

	"github.com/limenhq/limen/gateway/tunnel"
)

// workerHooks is how proxy features talk to workers over the control
// stream: each registers the message types it handles and what it must push
// when a worker connects. Registration happens while the proxy is built,
// before any worker connects, so no lock is needed.
type workerHooks struct {
	log      *slog.Logger
	handlers map[string]func(ctx context.Context, w *tunnel.Worker, m tunnel.Message)
	connects []func(ctx context.Context, w *tunnel.Worker) error
}

func newWorkerHooks(log *slog.Logger) *workerHooks {
	return &workerHooks{log: log, handlers: map[string]func(context.Context, *tunnel.Worker, tunnel.Message){}}
}

// handle registers fn for control messages of type typ.
func (h *workerHooks) handle(typ string, fn func(ctx context.Context, w *tunnel.Worker, m tunnel.Message)) {
	h.handlers[typ] = fn
}

// connect registers fn to run when a worker connects, before it may serve
// requests; an error drops the worker.
func (h *workerHooks) connect(fn func(ctx context.Context, w *tunnel.Worker) error) {
	h.connects = append(h.connects, fn)
}

func (h *workerHooks) onMessage(ctx context.Context, w *tunnel.Worker, m tunnel.Message) {
	fn, ok := h.handlers[m.Type]
	if !ok {
		h.log.Warn("unknown control message from worker", "type", m.Type, "cluster", w.Info().Cluster)
		return
	}
	fn(ctx, w, m)
}

func (h *workerHooks) onConnect(ctx context.Context, w *tunnel.Worker) error {
	for _, fn := range h.connects {
		if err := fn(ctx, w); err != nil {
			return err
		}
	}
	return nil
}
