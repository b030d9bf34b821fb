package locks

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

// Set is the in-memory view of the locks in force, consulted on the hot path
// of both hops. Lookups read an immutable map through an atomic pointer, so
// they take no lock and never wait for a writer; writers copy the map. A Set
// must be made with NewSet and is safe for concurrent use.
type Set struct {
	locks atomic.Pointer[map[Target]Lock]
	gen   atomic.Uint64

	mu       sync.Mutex // serializes writers and guards watchers
	watchers map[Target]map[*watcher]struct{}
	now      func() time.Time

	// The view's freshness (view.go): set by Guard before use.
	staleAfter time.Duration
	mode       Mode
	confirmed  atomic.Int64 // Unix nanoseconds
}

// watcher is told of every lock set on its target, with s.mu held.
type watcher struct{ notify func(Lock) }

// NewSet returns an empty Set.
func NewSet() *Set {
	s := &Set{watchers: make(map[Target]map[*watcher]struct{}), now: time.Now}
	empty := map[Target]Lock{}
	s.locks.Store(&empty)
	return s
}

// Locked returns the lock in force on p at now, if any.
func (s *Set) Locked(p identity.Principal, now time.Time) (Lock, bool) {
	l, ok := (*s.locks.Load())[TargetOf(p)]
	if !ok || !l.Active(now) {
		return Lock{}, false
	}
	return l, true
}

// Check is Locked as an error: a *LockedError naming the lock, or nil. A
// guarded set in strict mode whose view is stale refuses everyone with a
// *StaleError (view.go); HTTPStatus tells the two apart.
func (s *Set) Check(p identity.Principal, now time.Time) error {
	if err := s.refuseStale(now); err != nil {
		return err
	}
	if l, ok := s.Locked(p, now); ok {
		return &LockedError{Lock: l}
	}
	return nil
}

// List returns the locks in force at now, in no particular order.
func (s *Set) List(now time.Time) []Lock {
	m := *s.locks.Load()
	out := make([]Lock, 0, len(m))
	for _, l := range m {
		if l.Active(now) {
			out = append(out, l)
		}
	}
	return out
}

// Generation counts the changes applied so far; it lets a caller tell
// whether the set changed since it last looked.
func (s *Set) Generation() uint64 { return s.gen.Load() }

// Replace makes all the set's contents, as a full snapshot pushed on
// connect or loaded at start does. Expired locks are dropped. Watchers of
// every locked target are told.
func (s *Set) Replace(all []Lock) {
	now := s.now()
	next := make(map[Target]Lock, len(all))
	for _, l := range all {
		if l.Active(now) {
			next[l.Target] = l
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.locks.Store(&next)
	s.gen.Add(1)
	for t, l := range next {
		s.notifyLocked(t, l)
	}
}

// Apply makes one change. Setting a lock tells the target's watchers at
// once; expired locks are pruned on the way.
func (s *Set) Apply(c Change) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.locks.Load()
	next := make(map[Target]Lock, len(cur)+1)
	for t, l := range cur {
		if l.Active(now) {
			next[t] = l
		}
	}
	switch c.Op {
	case OpSet:
		if !c.Lock.Active(now) {
			delete(next, c.Lock.Target)
			break
		}
		next[c.Lock.Target] = c.Lock
	case OpRemove:
		delete(next, c.Lock.Target)
	}
	s.locks.Store(&next)
	s.gen.Add(1)
	if l, ok := next[c.Lock.Target]; ok && c.Op == OpSet {
		s.notifyLocked(c.Lock.Target, l)
	}
}

// Watch tells the caller, on the returned channel, as soon as a lock on p
// is set; if p is locked already, the channel holds that lock at once. The
// channel holds at most one pending lock and is never closed. Call cancel
// when done watching; it is idempotent.
func (s *Set) Watch(p identity.Principal) (<-chan Lock, func()) {
	ch := make(chan Lock, 1)
	cancel := s.Notify(p, func(l Lock) {
		select {
		case ch <- l:
		default: // a lock is pending already
		}
	})
	return ch, cancel
}

// Notify calls f whenever a lock on p is set, and once before it returns if
// p is locked already. It costs no goroutine, so a caller can watch every
// request it serves. f runs with the set's writer lock held: it must return
// quickly and must not call into the Set (cancelling a context is the
// intended use). Call cancel when done; it is idempotent, and f is not
// called once it has returned.
func (s *Set) Notify(p identity.Principal, f func(Lock)) (cancel func()) {
	t := TargetOf(p)
	w := &watcher{notify: f}
	s.mu.Lock()
	ws := s.watchers[t]
	if ws == nil {
		ws = make(map[*watcher]struct{})
		s.watchers[t] = ws
	}
	ws[w] = struct{}{}
	if l, ok := (*s.locks.Load())[t]; ok && l.Active(s.now()) {
		f(l)
	}
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			delete(s.watchers[t], w)
			if len(s.watchers[t]) == 0 {
				delete(s.watchers, t)
			}
		})
	}
}

// notifyLocked tells t's watchers of l; s.mu is held.
func (s *Set) notifyLocked(t Target, l Lock) {
	for w := range s.watchers[t] {
		w.notify(l)
	}
}

// watching reports how many watchers t has, for tests.
func (s *Set) watching(t Target) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watchers[t])
}
