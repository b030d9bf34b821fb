package sessions

import (
	"errors"
	"fmt"

	"github.com/limenhq/limen/gateway/tunnel"
)

// Control-stream message types: the proxy pushes TypeKill to the workers of
// the session's cluster; each answers TypeKillAck.
const (
	TypeKill    = "session.kill"
	TypeKillAck = "session.kill.ack"
)

// Kill is the body of TypeKill.
type Kill struct {
	ID string `json:"id"`
	// By names the admin who killed the session, for the worker's log.
	By string `json:"by,omitempty"`
	// Reason is why the session ends: ReasonKilled when empty, or
	// ReasonShutdown when the proxy is stopping.
	Reason Reason `json:"reason,omitempty"`
}

// KillAck is the body of TypeKillAck.
type KillAck struct {
	// Found says whether the receiver had the session live.
	Found bool   `json:"found"`
	Error string `json:"error,omitempty"`
}

// KillMessage builds the push that kills session id on a worker.
func KillMessage(id, by string) (tunnel.Message, error) {
	return endMessage(Kill{ID: id, By: by})
}

// ShutdownMessage builds the push that ends session id on a worker because
// the proxy is stopping: the worker ends it first, so that it can tell the
// client why.
func ShutdownMessage(id string) (tunnel.Message, error) {
	return endMessage(Kill{ID: id, By: "the proxy, stopping", Reason: ReasonShutdown})
}

func endMessage(k Kill) (tunnel.Message, error) {
	if err := ValidID(k.ID); err != nil {
		return tunnel.Message{}, err
	}
	return tunnel.NewMessage(TypeKill, k)
}

// DecodeKill reads a TypeKill body.
func DecodeKill(m tunnel.Message) (Kill, error) {
	if m.Type != TypeKill {
		return Kill{}, fmt.Errorf("%w: %q is not %s", tunnel.ErrBadMessage, m.Type, TypeKill)
	}
	var k Kill
	if err := m.Decode(&k); err != nil {
		return Kill{}, err
	}
	if err := ValidID(k.ID); err != nil {
		return Kill{}, fmt.Errorf("%w: %s: %v", tunnel.ErrBadMessage, TypeKill, err)
	}
	if len(k.By) > 512 {
		return Kill{}, fmt.Errorf("%w: %s: by is too long", tunnel.ErrBadMessage, TypeKill)
	}
	switch k.Reason {
	case "":
		k.Reason = ReasonKilled
	case ReasonKilled, ReasonShutdown:
	default:
		return Kill{}, fmt.Errorf("%w: %s: reason %q is neither %s nor %s", tunnel.ErrBadMessage, TypeKill, k.Reason, ReasonKilled, ReasonShutdown)
	}
	return k, nil
}

// HandleMessage kills the session a TypeKill push names and returns the
// TypeKillAck reply to send back; a push that does not decode kills nothing
// and its error is both returned and carried in the reply.
func (r *Registry) HandleMessage(m tunnel.Message) (tunnel.Message, error) {
	var ack KillAck
	k, err := DecodeKill(m)
	if err == nil {
		ack.Found = r.endLive(k.ID, k.Reason)
		r.cfg.Logger.Info("session end pushed", "session", k.ID, "reason", k.Reason, "by", k.By, "found", ack.Found)
	} else {
		ack.Error = err.Error()
	}
	reply, rerr := m.Reply(TypeKillAck, ack)
	return reply, errors.Join(err, rerr)
}

// CheckKillAck reads a worker's answer to a kill: whether it had the session.
func CheckKillAck(m tunnel.Message) (found bool, err error) {
	if m.Type != TypeKillAck {
		return false, fmt.Errorf("%w: kill answered with %q, want %s", tunnel.ErrBadMessage, m.Type, TypeKillAck)
	}
	var a KillAck
	if err := m.Decode(&a); err != nil {
		return false, err
	}
	if a.Error != "" {
		return false, fmt.Errorf("worker refused kill: %s", a.Error)
	}
	return a.Found, nil
}
