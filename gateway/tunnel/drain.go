package tunnel

import (
	"context"
	"fmt"
)

// A worker that is about to stop (a rolling update, a node drain) says so
// with TypeDrain. The proxy then sends it new streams only while no other
// worker of its cluster is usable, and answers how many others are: the
// worker hands over once a replacement is connected, ends its sessions,
// delivers their audit events and recordings, and only then closes.

// Message types of the drain handshake.
const (
	TypeDrain    = "drain"
	TypeDrainAck = "drain-ack"
)

// DrainAck answers TypeDrain.
type DrainAck struct {
	// Others counts the usable workers of the same cluster that are not
	// draining: the ones new streams now go to.
	Others int `json:"others"`
}

// Drain tells the proxy this worker is stopping, and returns how many
// other workers of its cluster take new streams now. Call it again to ask
// again: it changes nothing the second time.
func (c *Client) Drain(ctx context.Context) (DrainAck, error) {
	m, err := NewMessage(TypeDrain, struct{}{})
	if err != nil {
		return DrainAck{}, err
	}
	reply, err := c.Request(ctx, m)
	if err != nil {
		return DrainAck{}, err
	}
	if reply.Type != TypeDrainAck {
		return DrainAck{}, fmt.Errorf("%w: got %q in answer to %s", ErrBadMessage, reply.Type, TypeDrain)
	}
	var ack DrainAck
	if err := reply.Decode(&ack); err != nil {
		return DrainAck{}, err
	}
	return ack, nil
}

// drain marks w as draining and answers m with the number of other
// workers that take new streams.
func (s *Server) drain(ctx context.Context, w *Worker, m Message) {
	if !w.draining.Swap(true) {
		logger(s.Logger).Info("tunnel: worker draining", "cluster", w.info.Cluster, "worker", w.info.WorkerID, "session", w.info.SessionID)
	}
	others := 0
	for _, x := range s.snapshot(w.info.Cluster) {
		if x != w && x.usable() && !x.draining.Load() {
			others++
		}
	}
	reply, err := m.Reply(TypeDrainAck, DrainAck{Others: others})
	if err == nil {
		err = w.Send(ctx, reply)
	}
	if err != nil {
		logger(s.Logger).Warn("tunnel: drain not acknowledged", "worker", w.info.WorkerID, "err", err)
	}
}
