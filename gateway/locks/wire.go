package locks

import (
	"errors"
	"fmt"

	"github.com/limenhq/limen/gateway/tunnel"
)

// Control-stream message types. The proxy sends TypeList (every lock in
// force) when a worker connects and TypeSet or TypeRemove on each change; the
// worker answers each with TypeAck.
const (
	TypeList   = "lock.list"
	TypeSet    = "lock.set"
	TypeRemove = "lock.remove"
	TypeAck    = "lock.ack"
)

// ListBody is the body of TypeList.
type ListBody struct {
	Locks []Lock `json:"locks"`
}

// Ack is the body of TypeAck: the receiver's set generation after applying
// the push, or why it could not.
type Ack struct {
	Generation uint64 `json:"generation"`
	Error      string `json:"error,omitempty"`
}

// ListMessage builds the full-snapshot push sent on connect.
func ListMessage(all []Lock) (tunnel.Message, error) {
	if all == nil {
		all = []Lock{}
	}
	return tunnel.NewMessage(TypeList, ListBody{Locks: all})
}

// ChangeMessage builds the push for one change: TypeSet carrying the lock,
// or TypeRemove carrying the target.
func ChangeMessage(c Change) (tunnel.Message, error) {
	if err := c.Validate(); err != nil {
		return tunnel.Message{}, err
	}
	if c.Op == OpSet {
		return tunnel.NewMessage(TypeSet, c.Lock)
	}
	return tunnel.NewMessage(TypeRemove, c.Lock.Target)
}

// DecodeList reads a TypeList body; every lock must be valid.
func DecodeList(m tunnel.Message) ([]Lock, error) {
	if m.Type != TypeList {
		return nil, fmt.Errorf("%w: %q is not %s", tunnel.ErrBadMessage, m.Type, TypeList)
	}
	var b ListBody
	if err := m.Decode(&b); err != nil {
		return nil, err
	}
	for i, l := range b.Locks {
		if err := l.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %s lock %d: %v", tunnel.ErrBadMessage, TypeList, i, err)
		}
	}
	return b.Locks, nil
}

// DecodeChange reads a TypeSet or TypeRemove body.
func DecodeChange(m tunnel.Message) (Change, error) {
	var c Change
	switch m.Type {
	case TypeSet:
		c.Op = OpSet
		if err := m.Decode(&c.Lock); err != nil {
			return Change{}, err
		}
	case TypeRemove:
		c.Op = OpRemove
		if err := m.Decode(&c.Lock.Target); err != nil {
			return Change{}, err
		}
	default:
		return Change{}, fmt.Errorf("%w: %q is not a lock change", tunnel.ErrBadMessage, m.Type)
	}
	if err := c.Validate(); err != nil {
		return Change{}, fmt.Errorf("%w: %s: %v", tunnel.ErrBadMessage, m.Type, err)
	}
	return c, nil
}

// HandleMessage applies a lock push (TypeList, TypeSet or TypeRemove) to s and returns the
// TypeAck reply to send back. A push that does not decode changes nothing;
// its reply carries the error, which is also returned.
func (s *Set) HandleMessage(m tunnel.Message) (tunnel.Message, error) {
	var err error
	if m.Type == TypeList {
		var all []Lock
		if all, err = DecodeList(m); err == nil {
			s.Replace(all)
		}
	} else {
		var c Change
		if c, err = DecodeChange(m); err == nil {
			s.Apply(c)
		}
	}
	ack := Ack{Generation: s.Generation()}
	if err != nil {
		ack.Error = err.Error()
	}
	reply, rerr := m.Reply(TypeAck, ack)
	return reply, errors.Join(err, rerr)
}

// CheckAck reads the worker's answer to a push: nil if it applied it.
func CheckAck(m tunnel.Message) error {
	if m.Type != TypeAck {
		return fmt.Errorf("%w: lock push answered with %q, want %s", tunnel.ErrBadMessage, m.Type, TypeAck)
	}
	var a Ack
	if err := m.Decode(&a); err != nil {
		return err
	}
	if a.Error != "" {
		return fmt.Errorf("worker refused lock push: %s", a.Error)
	}
	return nil
}
