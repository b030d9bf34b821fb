package main

import (
	"context"
	"errors"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/gateway/tunnel"
)

// mountRecordings opens the recording store in dataDir and registers the
// control messages workers use for session events and recording uploads.
func (s *proxyServer) mountRecordings(ctx context.Context, dataDir string) error {
	store, err := recstore.Open(recstore.Path(dataDir))
	if err != nil {
		return err
	}
	s.Hooks.handle(msgAuditEvent, func(ctx context.Context, w *tunnel.Worker, m tunnel.Message) {
		reply(ctx, s, w, m, msgAuditAck, auditAck{Error: s.storeWorkerEvent(ctx, w, m)})
	})
	s.Hooks.handle(recstore.MsgChunk, func(ctx context.Context, w *tunnel.Worker, m tunnel.Message) {
		var c recstore.Chunk
		if err := m.Decode(&c); err != nil {
			reply(ctx, s, w, m, recstore.MsgAck, recstore.Ack{Error: "malformed chunk: " + err.Error()})
			return
		}
		ack := store.Put(w.Info().Cluster, c)
		if ack.Error != "" {
			s.Log.Warn("recording chunk refused", "cluster", w.Info().Cluster, "id", c.ID, "err", ack.Error)
		} else if ack.SHA256 != "" {
			s.Log.Info("recording stored", "cluster", w.Info().Cluster, "id", c.ID, "sha256", ack.SHA256)
		}
		reply(ctx, s, w, m, recstore.MsgAck, ack)
	})
	return nil
}

// storeWorkerEvent stores a session event sent by a worker and returns ""
// once it is durable, or why it was not stored (proxy.Kube.SessionEvent).
func (s *proxyServer) storeWorkerEvent(ctx context.Context, w *tunnel.Worker, m tunnel.Message) string {
	var ev audit.Event
	if err := m.Decode(&ev); err != nil {
		return "malformed event: " + err.Error()
	}
	if err := s.Kube.SessionEvent(ctx, w.Info().Cluster, ev); err != nil {
		if errors.Is(err, proxy.ErrForeignEvent) {
			s.Log.Warn("worker event refused", "cluster", w.Info().Cluster, "err", err)
		} else {
			s.Log.Error("store session event", "type", ev.Type, "err", err)
		}
		return err.Error()
	}
	return ""
}

func reply(ctx context.Context, s *proxyServer, w *tunnel.Worker, m tunnel.Message, typ string, body any) {
	r, err := m.Reply(typ, body)
	if err == nil {
		err = w.Send(ctx, r)
	}
	if err != nil {
		s.Log.Warn("reply to worker", "type", typ, "err", err)
	}
}
