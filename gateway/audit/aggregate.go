package audit

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Aggregator is a Sink in front of another that stores the refusals of
// unauthenticated clients — auth.denied at the proxy with no principal: no
// or a bad client certificate, a failed login or enrollment — as at most
// two events per client address and action per interval: the first refusal
// at once, and at the end of the interval one that stands for the others,
// with their number in Denied.Count (the last one's details). Any client
// can send those refusals as fast as it likes; stored one by one, a flood
// would fill the audit store and hold up the events of everyone else.
//
// Every other event goes straight to the next Sink. For an aggregated
// refusal after the first, Emit returns nil once the refusal is counted:
// it is stored at the end of its interval (or at Close). A refusal stands
// whether or not it is recorded, so nothing waits on that.
type Aggregator struct {
	next     Sink
	interval time.Duration
	maxAddrs int
	now      func() time.Time
	log      *slog.Logger

	mu      sync.Mutex
	windows map[aggKey]*aggWindow

	quit chan struct{}
	done chan struct{}
	once sync.Once
}

// AggregatorOptions configure an Aggregator.
type AggregatorOptions struct {
	// Interval is how long refusals of one address and action are counted
	// before their event is stored; 0 means a minute.
	Interval time.Duration
	// MaxAddrs bounds the addresses counted at once; refusals from further
	// addresses are counted together under OtherClients. 0 means 4096.
	MaxAddrs int
	// Now is the clock; nil means time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// OtherClients is the client address of an aggregated refusal that stands
// for clients past AggregatorOptions.MaxAddrs.
const OtherClients = "(other clients)"

type aggKey struct{ addr, action string }

type aggWindow struct {
	end   time.Time
	count int   // refusals after the first
	last  Event // the latest of them
}

// NewAggregator starts an Aggregator in front of next. Close it before
// closing next.
func NewAggregator(next Sink, opts AggregatorOptions) *Aggregator {
	if opts.Interval <= 0 {
		opts.Interval = time.Minute
	}
	if opts.MaxAddrs <= 0 {
		opts.MaxAddrs = 4096
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	a := &Aggregator{next: next, interval: opts.Interval, maxAddrs: opts.MaxAddrs, now: opts.Now, log: opts.Logger,
		windows: map[aggKey]*aggWindow{}, quit: make(chan struct{}), done: make(chan struct{})}
	go a.run()
	return a
}

// Aggregated reports whether the Aggregator counts e rather than storing it
// alone: a refusal at the proxy of a client that did not authenticate.
func Aggregated(e Event) bool {
	return e.Type == TypeAuthDenied && e.Denied != nil && e.Denied.Hop == HopProxy &&
		e.Principal.Kind == "" && e.Principal.Name == ""
}

// Emit implements Sink.
func (a *Aggregator) Emit(ctx context.Context, e Event) error {
	if !Aggregated(e) {
		return a.next.Emit(ctx, e)
	}
	if err := e.Validate(); err != nil {
		return err
	}
	key := aggKey{addr: hostOf(e.ClientAddr), action: e.Denied.Action}
	a.mu.Lock()
	if _, ok := a.windows[key]; !ok && len(a.windows) >= a.maxAddrs {
		key.addr = OtherClients
	}
	if w, ok := a.windows[key]; ok {
		w.count++
		w.last = e
		a.mu.Unlock()
		return nil
	}
	a.windows[key] = &aggWindow{end: a.now().Add(a.interval)}
	a.mu.Unlock()
	if key.addr == OtherClients {
		e.ClientAddr = OtherClients
	}
	return a.next.Emit(ctx, e)
}

// Submit implements Submitter: an event the Aggregator does not count goes
// to the next Sink's Submit, when it has one.
func (a *Aggregator) Submit(e Event) Commit {
	if !Aggregated(e) {
		return Submit(context.Background(), a.next, e)
	}
	return Submit(context.Background(), sinkFunc(a.Emit), e)
}

// Append implements Submitter like Submit.
func (a *Aggregator) Append(e Event) {
	if !Aggregated(e) {
		Append(context.Background(), a.next, e)
		return
	}
	Submit(context.Background(), sinkFunc(a.Emit), e)
}

type sinkFunc func(ctx context.Context, e Event) error

func (f sinkFunc) Emit(ctx context.Context, e Event) error { return f(ctx, e) }

// Close stores the refusals still being counted and stops the Aggregator.
func (a *Aggregator) Close() {
	a.once.Do(func() { close(a.quit) })
	<-a.done
}

func (a *Aggregator) run() {
	defer close(a.done)
	// A window ends at most an eighth of the interval (or a second) late.
	tick := time.NewTicker(min(max(a.interval/8, 10*time.Millisecond), time.Second))
	defer tick.Stop()
	for {
		select {
		case <-a.quit:
			a.flush(time.Time{})
			return
		case <-tick.C:
			a.flush(a.now())
		}
	}
}

// flush stores the count of every window that ended by now (all when now
// is zero).
func (a *Aggregator) flush(now time.Time) {
	var due []Event
	a.mu.Lock()
	for k, w := range a.windows {
		if !now.IsZero() && w.end.After(now) {
			continue
		}
		delete(a.windows, k)
		if w.count == 0 {
			continue
		}
		e := w.last
		d := *e.Denied
		d.Count = w.count
		e.Denied = &d
		if k.addr == OtherClients {
			e.ClientAddr = OtherClients
		}
		due = append(due, e)
	}
	a.mu.Unlock()
	for _, e := range due {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := a.next.Emit(ctx, e); err != nil {
			a.log.Error("aggregated refusals not recorded", "client", e.ClientAddr, "action", e.Denied.Action,
				"count", e.Denied.Count, "err", err)
		}
		cancel()
	}
}

// hostOf is addr without its port: refusals count per client address, not
// per connection.
func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

var _ Sink = (*Aggregator)(nil)
