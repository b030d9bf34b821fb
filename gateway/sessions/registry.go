package sessions

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limenhq/limen/gateway/locks"
)

// DefaultRecent is how many ended sessions List keeps by default.
const DefaultRecent = 256

// Config holds a Registry's dependencies.
type Config struct {
	// Locks, when set, is consulted at Register and watched for the life of
	// every session: a lock on its principal ends it at once.
	Locks *locks.Set
	// Recent bounds the ended sessions List remembers; 0 means
	// DefaultRecent.
	Recent int
	// OnStart, if set, runs once per registered session once it is
	// admitted, on Register's caller's goroutine; keep it short.
	OnStart func(Info)
	// OnEnd, if set, runs once per session right after it ends, on the
	// goroutine that ended it (a watchdog callback's, Kill's or End's caller); use it
	// for the session.end audit event and keep it short.
	OnEnd func(Info)
	// Logger receives session ends; nil means slog.Default().
	Logger *slog.Logger
	// ClientGone, if set, names why a session ended whose client's
	// context ended, from that context's cause: on the worker, the tunnel
	// dying under the stream is the proxy lost (ReasonProxyLost), not the
	// user hanging up. Unset, or false: ReasonClientClosed.
	ClientGone func(cause error) (Reason, bool)
}

// Registry tracks the live sessions of one hop and arms their watchdogs
// (callbacks, no goroutine per session). It is safe for concurrent use;
// Close ends every session and stops every watchdog.
type Registry struct {
	cfg Config
	wg  sync.WaitGroup // one per listed session until its end is reported

	mu     sync.Mutex
	live   map[string]*Live
	recent []Info // ring of ended sessions: n of them, oldest at index at
	at, n  int
	closed bool

	// observers are told of every ended session after OnEnd (metrics).
	observers atomic.Pointer[[]func(Info)]
}

// OnEnded adds f to the functions told of every session that ends, after
// Config.OnEnd, on the same goroutine; keep it short. It is for observers
// (metrics) that come after the registry was built.
func (r *Registry) OnEnded(f func(Info)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var fs []func(Info)
	if old := r.observers.Load(); old != nil {
		fs = append(fs, *old...)
	}
	fs = append(fs, f)
	r.observers.Store(&fs)
}

// New builds a registry.
func New(cfg Config) *Registry {
	if cfg.Recent <= 0 {
		cfg.Recent = DefaultRecent
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Registry{cfg: cfg, live: make(map[string]*Live), recent: make([]Info, cfg.Recent)}
}

// Live is the handle on one tracked request. Its Context is cancelled, with
// an *Ended cause, when the session ends for any reason; the stream's
// goroutines and its upstream connection must use that context.
type Live struct {
	reg     *Registry
	s       Session
	ctx     context.Context
	cancel  context.CancelCauseFunc
	in, out atomic.Int64
	once    sync.Once
	endedAt time.Time // written once, under once, before cancel
	// unlisted marks a request Track only guards; release stops its lock
	// watch and expiry timer (a listed session's stop as it ends).
	unlisted bool
	release  func()
}

// Track puts one request's response under this hop's watchdog and returns
// its handle; the caller relays under Context and calls End when done.
//
// A stream (s.Kind from Classify, not KindNone) is registered: listed,
// killable by ID, audited when it ends (Config.OnEnd); see Register. Any
// other request is guarded only: a lock on its principal or its grant's
// expiry cancels its Context all the same, so no response outlives them
// whatever Classify made of it, but it is not listed, logged or audited as
// a session. Guarding costs no goroutine: a lock callback, a timer and a
// context.
func (r *Registry) Track(ctx context.Context, s Session) (*Live, error) {
	if s.Kind != KindNone {
		return r.Register(ctx, s)
	}
	return r.guard(ctx, s)
}

// guard is Track for a request that opens no stream.
func (r *Registry) guard(ctx context.Context, s Session) (*Live, error) {
	if !s.Expires.IsZero() && !time.Now().Before(s.Expires) {
		return nil, &Ended{Reason: ReasonExpired}
	}
	l := &Live{reg: r, s: s, unlisted: true, release: func() {}}
	// The client going away cancels ctx and so this context: no watchdog.
	l.ctx, l.cancel = context.WithCancelCause(ctx)
	stopWatch := func() {}
	if r.cfg.Locks != nil {
		// Runs under the lock set's mutex: end only cancels.
		stopWatch = r.cfg.Locks.Notify(s.Principal, func(lk locks.Lock) { l.end(&Ended{Reason: ReasonLocked, Lock: &lk}) })
		if e := l.Ended(); e != nil && e.Lock != nil {
			stopWatch()
			return nil, &locks.LockedError{Lock: *e.Lock}
		}
	}
	l.release = stopWatch
	if !s.Expires.IsZero() {
		t := time.AfterFunc(time.Until(s.Expires), func() { l.end(&Ended{Reason: ReasonExpired}) })
		l.release = func() { t.Stop(); stopWatch() }
	}
	return l, nil
}

// Register records s and arms its watchdog. It refuses a principal who is
// locked (a *locks.LockedError), a grant already expired (an *Ended with
// ReasonExpired), a malformed session, a duplicate ID and a closed
// registry. The session ends with ReasonClientClosed if ctx ends first, so
// pass the request's context; the returned Live keeps ctx's values only.
func (r *Registry) Register(ctx context.Context, s Session) (*Live, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	now := time.Now()
	if s.Start.IsZero() {
		s.Start = now
	}
	if !s.Expires.IsZero() && !now.Before(s.Expires) {
		return nil, &Ended{Reason: ReasonExpired}
	}
	l := &Live{reg: r, s: s}
	l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(ctx))

	// The watchdog is callbacks (a lock watch, a timer, a context), as
	// guard's, not a goroutine: an idle stream costs no stack. Each starts
	// a goroutine for l.end only when it fires: the lock set calls back
	// under its mutex, and end runs OnEnd, which stores the session.end.
	stopWatch := func() {}
	var early atomic.Pointer[locks.Lock] // a lock found before l is listed
	var listed atomic.Bool
	if r.cfg.Locks != nil {
		// Watch before checking: Notify calls back at once if the principal
		// is locked already, and a lock set between the two still fires.
		stopWatch = r.cfg.Locks.Notify(s.Principal, func(lk locks.Lock) {
			if !listed.Load() {
				early.CompareAndSwap(nil, &lk)
				return
			}
			go l.end(&Ended{Reason: ReasonLocked, Lock: &lk})
		})
		if lk := early.Load(); lk != nil {
			stopWatch()
			l.cancel(&locks.LockedError{Lock: *lk})
			return nil, &locks.LockedError{Lock: *lk}
		}
	}

	r.mu.Lock()
	if err := r.admit(s.ID); err != nil {
		r.mu.Unlock()
		stopWatch()
		l.cancel(err)
		return nil, err
	}
	r.live[s.ID] = l
	r.wg.Add(1) // done once l has ended and been reported (end)
	listed.Store(true)
	r.mu.Unlock()
	if lk := early.Load(); lk != nil { // locked while being listed
		go l.end(&Ended{Reason: ReasonLocked, Lock: lk})
	}

	stopClient := context.AfterFunc(ctx, func() { l.end(r.clientGone(context.Cause(ctx))) })
	stopExpiry := func() bool { return false }
	if !s.Expires.IsZero() {
		// A timer at the exact expiry: nothing polls.
		stopExpiry = time.AfterFunc(time.Until(s.Expires), func() { l.end(&Ended{Reason: ReasonExpired}) }).Stop
	}
	// However l ends, its watches go with it.
	context.AfterFunc(l.ctx, func() { stopExpiry(); stopClient(); stopWatch() })
	if r.cfg.OnStart != nil {
		r.cfg.OnStart(l.Info())
	}
	return l, nil
}

// admit checks that id may be registered; r.mu is held.
func (r *Registry) admit(id string) error {
	switch {
	case r.closed:
		return ErrClosed
	case r.live[id] != nil:
		return fmt.Errorf("register session %s: %w", id, ErrDuplicate)
	}
	return nil
}

// clientGone is why a session ends whose client's context ended with cause.
func (r *Registry) clientGone(cause error) *Ended {
	if r.cfg.ClientGone != nil {
		if reason, ok := r.cfg.ClientGone(cause); ok {
			return &Ended{Reason: reason, Err: cause}
		}
	}
	return &Ended{Reason: ReasonClientClosed}
}

// Context is cancelled when the session ends; its cause is an *Ended.
func (l *Live) Context() context.Context { return l.ctx }

// Done is closed when the session ends.
func (l *Live) Done() <-chan struct{} { return l.ctx.Done() }

// ID is the session's ID.
func (l *Live) ID() string { return l.s.ID }

// End ends the session for reason; it reports whether this call ended it
// (false if it had ended already). Call it when the stream finishes, with
// ReasonCompleted or ReasonClientClosed; for a request Track only guarded,
// it also stops the guard.
func (l *Live) End(reason Reason) bool {
	ended := l.end(&Ended{Reason: reason})
	if l.unlisted {
		l.release()
	}
	return ended
}

// Fail ends the session with ReasonError and err as its detail.
func (l *Live) Fail(err error) bool { return l.end(&Ended{Reason: ReasonError, Err: err}) }

// Lose ends the session with ReasonWorkerLost and err, what broke the
// tunnel, as its detail.
func (l *Live) Lose(err error) bool { return l.end(&Ended{Reason: ReasonWorkerLost, Err: err}) }

// LoseAfter is Lose, with tell run first, before the session's context
// ends: tell gives the client its last word (why the stream ends) while
// nothing closes its connection yet, and no other end (the client hanging
// up once it read it) can take the session's place. Every other end waits
// for tell, so it must be bounded (a write deadline). tell does not run
// when the session had already ended.
func (l *Live) LoseAfter(err error, tell func()) bool {
	return l.endAfter(&Ended{Reason: ReasonWorkerLost, Err: err}, tell)
}

// Ended is why the session ended, or nil while it is live.
func (l *Live) Ended() *Ended {
	if l.ctx.Err() == nil {
		return nil
	}
	e, _ := context.Cause(l.ctx).(*Ended)
	return e
}

// AddBytes counts bytes from the user (in) and to the user (out).
func (l *Live) AddBytes(in, out int64) {
	if in != 0 {
		l.in.Add(in)
	}
	if out != 0 {
		l.out.Add(out)
	}
}

// Info is a snapshot of the session.
func (l *Live) Info() Info {
	i := Info{
		ID: l.s.ID, Principal: l.s.Principal, Cluster: l.s.Cluster, Kind: l.s.Kind, Target: l.s.Target,
		Start: l.s.Start, Expires: l.s.Expires, BytesIn: l.in.Load(), BytesOut: l.out.Load(),
	}
	if e := l.Ended(); e != nil {
		i.End, i.Reason, i.Detail = l.endedAt, e.Reason, e.Detail()
	}
	return i
}

func (l *Live) end(e *Ended) bool { return l.endAfter(e, nil) }

func (l *Live) endAfter(e *Ended, before func()) bool {
	first := false
	l.once.Do(func() {
		first = true
		if before != nil {
			before()
		}
		l.endedAt = time.Now()
		l.cancel(e)
	})
	if !first || l.unlisted { // not a session to report
		return first
	}
	info := l.Info()
	l.reg.ended(l, info)
	l.reg.cfg.Logger.Info("session ended", "session", info.ID, "principal", info.Principal.String(),
		"cluster", info.Cluster, "kind", info.Kind, "reason", info.Reason, "detail", info.Detail,
		"bytes_in", info.BytesIn, "bytes_out", info.BytesOut)
	if l.reg.cfg.OnEnd != nil {
		l.reg.cfg.OnEnd(info)
	}
	if fs := l.reg.observers.Load(); fs != nil {
		for _, f := range *fs {
			f(info)
		}
	}
	l.reg.wg.Done() // Close waits for every listed session's report
	return true
}

// ended moves l from the live map to the ring of recent sessions.
func (r *Registry) ended(l *Live, info Info) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.live[info.ID] == l {
		delete(r.live, info.ID)
	}
	r.recent[(r.at+r.n)%len(r.recent)] = info
	if r.n < len(r.recent) {
		r.n++
	} else {
		r.at = (r.at + 1) % len(r.recent)
	}
}

// Kill ends the live session id with ReasonKilled; it reports whether
// there was one.
func (r *Registry) Kill(id string) bool { return r.endLive(id, ReasonKilled) }

// EndAll ends every live session from outside with reason, and returns
// how many it ended: a proxy that can no longer vouch for its streams
// (its lock view is stale) ends them all.
func (r *Registry) EndAll(reason Reason) int {
	r.mu.Lock()
	live := make([]*Live, 0, len(r.live))
	for _, l := range r.live {
		live = append(live, l)
	}
	r.mu.Unlock()
	n := 0
	for _, l := range live {
		if l.end(&Ended{Reason: reason}) {
			n++
		}
	}
	return n
}

// endLive ends the live session id from outside, with reason; it reports
// whether there was one.
func (r *Registry) endLive(id string, reason Reason) bool {
	r.mu.Lock()
	l := r.live[id]
	r.mu.Unlock()
	return l != nil && l.end(&Ended{Reason: reason})
}

// Get returns a snapshot of session id, live or recently ended. The proxy
// asks it for every session event a worker sends: it looks the session up
// instead of listing and sorting them all (a thousand watches ending was a
// thousand lists of a thousand).
func (r *Registry) Get(id string) (Info, bool) {
	r.mu.Lock()
	l := r.live[id]
	if l == nil {
		defer r.mu.Unlock()
		for k := r.n - 1; k >= 0; k-- { // most recent first, as List
			if i := r.recentAt(k); i.ID == id {
				return i, true
			}
		}
		return Info{}, false
	}
	r.mu.Unlock()
	return l.Info(), true
}

// List returns the live sessions, oldest first, then the recently ended
// ones, most recent first.
func (r *Registry) List() []Info {
	r.mu.Lock()
	live := make([]*Live, 0, len(r.live))
	for _, l := range r.live {
		live = append(live, l)
	}
	recent := make([]Info, 0, r.n)
	for k := r.n - 1; k >= 0; k-- {
		recent = append(recent, r.recentAt(k))
	}
	r.mu.Unlock()
	out := make([]Info, 0, len(live)+len(recent))
	for _, l := range live {
		out = append(out, l.Info())
	}
	slices.SortFunc(out, func(a, b Info) int { return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.ID, b.ID)) })
	return append(out, recent...)
}

// recentAt is the k-th oldest of the recently ended sessions held (k < r.n);
// r.mu is held.
func (r *Registry) recentAt(k int) Info { return r.recent[(r.at+k)%len(r.recent)] }

// Close refuses new sessions, ends the live ones with ReasonShutdown and
// waits until every session's end has been reported (Config.OnEnd), those
// a lock, an expiry or a client ended meanwhile included.
func (r *Registry) Close() {
	r.mu.Lock()
	r.closed = true
	live := make([]*Live, 0, len(r.live))
	for _, l := range r.live {
		live = append(live, l)
	}
	r.mu.Unlock()
	for _, l := range live {
		l.end(&Ended{Reason: ReasonShutdown})
	}
	r.wg.Wait()
}
