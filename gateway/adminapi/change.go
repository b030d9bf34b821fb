package adminapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
)

// errStore marks a lock change the store did not make: nothing changed.
var errStore = errors.New("lock store unavailable")

// changer makes one lock change by the rules both the admin API and the
// break-glass on the proxy host (Local) follow: a lock is in force before
// it is audited, since it must not wait on the audit trail; an unlock is
// undone when it cannot be audited, so that none goes unrecorded.
type changer struct {
	store LockStore
	// emit audits the change by whoever makes it.
	emit func(audit.Event) error
	// applied puts a stored change in force (the proxy's lock set and its
	// workers); nil when a running proxy picks it up from the store
	// (Handler.SyncLocks).
	applied func(context.Context, locks.Change)
	// fields are added to every audited change.
	fields map[string]string
}

// set stores l, puts it in force and audits it. An error wrapping errStore
// means the lock is not in force; any other error means it is, unaudited.
func (c changer) set(ctx context.Context, l locks.Lock, by identity.Principal) error {
	if err := c.store.Add(ctx, l); err != nil {
		return fmt.Errorf("%w: %w", errStore, err)
	}
	c.apply(ctx, locks.Change{Op: locks.OpSet, Lock: l})
	if err := c.emit(c.event(audit.TypeUserLock, by, l)); err != nil {
		return fmt.Errorf("the lock is in force, but the audit trail did not record it: %w", err)
	}
	return nil
}

// remove deletes the lock on t, audits the removal and then puts it in
// force. Errors: locks.ErrNotFound; errStore (the lock stays); an audit
// failure with the lock put back (it stays), or, when the store fails
// again, with the lock removed unaudited.
func (c changer) remove(ctx context.Context, t locks.Target, by identity.Principal, now time.Time) (locks.Lock, error) {
	l, err := c.store.Remove(ctx, t, now)
	switch {
	case errors.Is(err, locks.ErrNotFound):
		return locks.Lock{}, err
	case err != nil:
		return locks.Lock{}, fmt.Errorf("%w: %w", errStore, err)
	}
	if err := c.emit(c.event(audit.TypeUserUnlock, by, l)); err != nil {
		if rerr := c.store.Add(ctx, l); rerr != nil {
			c.apply(ctx, locks.Change{Op: locks.OpRemove, Lock: l})
			return locks.Lock{}, fmt.Errorf("audit trail and lock store unavailable: the lock was removed but NOT audited: %w (restore: %v)", err, rerr)
		}
		return locks.Lock{}, fmt.Errorf("audit trail unavailable; the lock stays in force: %w", err)
	}
	c.apply(ctx, locks.Change{Op: locks.OpRemove, Lock: l})
	return l, nil
}

func (c changer) apply(ctx context.Context, ch locks.Change) {
	if c.applied != nil {
		c.applied(ctx, ch)
	}
}

func (c changer) event(typ audit.Type, by identity.Principal, l locks.Lock) audit.Event {
	e := lockEvent(typ, by, l)
	for k, v := range c.fields {
		e.Fields[k] = v
	}
	return e
}

// LockSyncInterval is how often a running proxy reads its lock store for
// changes made outside its admin API (Handler.SyncLocks).
const LockSyncInterval = time.Second

// SyncLocks puts in force the changes made to the lock store by someone
// other than this handler — the break-glass on the proxy host (Local), or
// another proxy sharing the store — and pushes them to the workers
// (OnChange). The proxy calls it every LockSyncInterval. It holds the
// handler's change lock, so that it never sees a change of the admin API
// half made (an unlock being undone because its audit failed).
func (h *Handler) SyncLocks(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.api.Now()
	stored, err := h.cfg.LockStore.List(ctx, now)
	if err != nil {
		return fmt.Errorf("sync locks: %w", err)
	}
	// Confirmed as of the read's start: a change stored after it is
	// caught by the next read.
	defer h.cfg.Locks.Confirmed(now)
	for _, ch := range locks.Diff(h.cfg.Locks.List(now), stored, now) {
		h.api.Logger.Info("lock changed in the store", "op", string(ch.Op), "target", ch.Lock.Target.String())
		h.changedCtx(ctx, ch)
	}
	return nil
}

// Local changes locks straight in the proxy's stores on the proxy host,
// with no certificate and no policy: the break-glass for admins who are all
// locked out (limen unlock --local). Its changes follow the admin API's
// rules and are audited the same way, by By, with the field via=local; a
// running proxy puts them in force within LockSyncInterval.
type Local struct {
	Store LockStore
	Audit audit.Sink
	// By is who acts: the proxy host's operating-system user, as a
	// principal (LocalPrincipal).
	By identity.Principal
	// Fields are added to each audited change (the host, the OS user).
	Fields map[string]string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// LocalCreator is how a lock set with Local names its creator: "local:"
// and the OS user, so that the locked user sees it came from the proxy
// host and not from an admin's certificate.
func LocalCreator(by identity.Principal) string { return "local:" + by.Name }

func (l Local) changer() changer {
	fields := map[string]string{"via": "local"}
	for k, v := range l.Fields {
		fields[k] = v
	}
	return changer{store: l.Store, fields: fields, emit: func(e audit.Event) error {
		e.Time = l.now()
		return l.Audit.Emit(context.Background(), e)
	}}
}

func (l Local) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

// Lock sets the lock req asks for.
func (l Local) Lock(ctx context.Context, req LockRequest) (locks.Lock, error) {
	lk, err := req.lock(l.By, l.now())
	if err != nil {
		return locks.Lock{}, err
	}
	lk.CreatedBy = LocalCreator(l.By)
	if err := l.changer().set(ctx, lk, l.By); err != nil {
		return locks.Lock{}, err
	}
	return lk, nil
}

// Unlock removes the lock on t.
func (l Local) Unlock(ctx context.Context, t locks.Target) (locks.Lock, error) {
	if err := t.Validate(); err != nil {
		return locks.Lock{}, err
	}
	return l.changer().remove(ctx, t, l.By, l.now())
}
