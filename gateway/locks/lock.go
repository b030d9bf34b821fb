// Package locks holds administrative locks on users and bots: the proxy's
// durable Store, the in-memory Set that both hops consult on every request
// and every open stream, and the control-stream messages that push the
// proxy's locks to workers (DESIGN.md §2: a locked principal is refused, and
// lock ends any open stream within a second, on both hops).
package locks

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

// MaxReasonLen bounds a lock's reason, in bytes.
const MaxReasonLen = 1024

// Target names the user or bot a lock applies to. Traits, client and login
// play no part: a lock covers every credential of the principal.
//
// Name is the principal's qualified name (identity.Principal.QualifiedName):
// "bob" for the local bob, "corp:bob" for identity provider corp's bob. A
// lock on one is never a lock on the other (DESIGN.md §2: two sources never
// share a name), and since local names cannot contain a colon, the stores,
// the wire and the admin paths need no other field to tell them apart.
type Target struct {
	Kind identity.Kind `json:"kind"`
	Name string        `json:"name"`
}

// TargetOf is the lock target that covers p.
func TargetOf(p identity.Principal) Target { return Target{Kind: p.Kind, Name: p.QualifiedName()} }

// ParseTarget reads what identity.ParsePrincipal reads: "NAME" (a local
// user), "user:NAME", "bot:NAME" or "user:ISSUER:NAME".
func ParseTarget(s string) (Target, error) {
	t := Target{Kind: identity.KindUser, Name: s}
	if k, rest, ok := strings.Cut(s, ":"); ok {
		t = Target{Kind: identity.Kind(k), Name: rest}
	}
	if err := t.Validate(); err != nil {
		return Target{}, err
	}
	return t, nil
}

// Principal is the principal t names (kind, issuer and name only).
func (t Target) Principal() (identity.Principal, error) {
	if t.Kind != identity.KindUser && t.Kind != identity.KindBot {
		return identity.Principal{}, fmt.Errorf("lock target kind %q: must be %q or %q", t.Kind, identity.KindUser, identity.KindBot)
	}
	p, err := identity.ParsePrincipal(string(t.Kind) + ":" + t.Name)
	if err != nil {
		return identity.Principal{}, fmt.Errorf("lock target name: %w", err)
	}
	return p, nil
}

// Validate checks the kind and the (qualified) name.
func (t Target) Validate() error {
	_, err := t.Principal()
	return err
}

// String is "user alice", "user corp:alice" or "bot ci", as messages show it.
func (t Target) String() string { return string(t.Kind) + " " + t.Name }

// Lock refuses every request of its target and ends its open streams until
// it is removed or, if Expires is set, until then.
type Lock struct {
	Target Target `json:"target"`
	Reason string `json:"reason"`
	// Expires is when the lock lapses; zero means it lasts until removed.
	Expires time.Time `json:"expires,omitzero"`
	// CreatedBy is the admin who set the lock, as Principal.String().
	CreatedBy string    `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
}

// Validate checks a lock received from an admin or a peer.
func (l Lock) Validate() error {
	if err := l.Target.Validate(); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(l.Reason) == "":
		return errors.New("lock reason is required: say why, it is shown to the locked user")
	case len(l.Reason) > MaxReasonLen:
		return fmt.Errorf("lock reason is %d bytes; keep it under %d", len(l.Reason), MaxReasonLen)
	case strings.ContainsFunc(l.Reason, isControl):
		return errors.New("lock reason contains control characters")
	case l.CreatedBy == "" || len(l.CreatedBy) > 2*identity.MaxNameLen:
		return errors.New("lock creator is missing or too long")
	case l.CreatedAt.IsZero():
		return errors.New("lock creation time is missing")
	case !l.Expires.IsZero() && !l.Expires.After(l.CreatedAt):
		return errors.New("lock expires before it was created")
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f || r == 0xfffd }

// Active reports whether the lock is in force at now.
func (l Lock) Active(now time.Time) bool { return l.Expires.IsZero() || now.Before(l.Expires) }

// Describe says who is locked, by whom, why and until when, for refusals and
// session ends: "user alice is locked by user:bob: incident 42 (until …)".
func (l Lock) Describe() string {
	s := fmt.Sprintf("%s is locked by %s: %s", l.Target, l.CreatedBy, l.Reason)
	if !l.Expires.IsZero() {
		s += " (until " + l.Expires.UTC().Format(time.RFC3339) + ")"
	}
	return s
}

// ErrLocked matches every *LockedError with errors.Is.
var ErrLocked = errors.New("principal is locked")

// LockedError refuses a request or ends a stream because of Lock. Its
// message names the lock and its reason, so it can be shown to the user.
type LockedError struct {
	Lock Lock
}

func (e *LockedError) Error() string { return e.Lock.Describe() }

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// Op is the kind of a Change.
type Op string

// Lock changes.
const (
	OpSet    Op = "set"
	OpRemove Op = "remove"
)

// Change is one lock being set (or replaced) or removed. For OpSet, Lock is
// the new lock; for OpRemove only Lock.Target matters.
type Change struct {
	Op   Op   `json:"op"`
	Lock Lock `json:"lock"`
}

// Validate checks the change's shape.
func (c Change) Validate() error {
	switch c.Op {
	case OpSet:
		return c.Lock.Validate()
	case OpRemove:
		return c.Lock.Target.Validate()
	}
	return fmt.Errorf("lock change op %q: must be %q or %q", c.Op, OpSet, OpRemove)
}
