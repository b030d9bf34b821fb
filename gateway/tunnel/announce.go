package tunnel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Peers is where the proxies that share a store find each other: each
// proxy records itself on a heartbeat, and lists the proxies whose last
// heartbeat is recent. MemPeers is the in-process implementation (one
// proxy, or several in one test); the shared store provides the one that
// spans processes.
type Peers interface {
	// Heartbeat records that self is alive now.
	Heartbeat(ctx context.Context, self Peer) error
	// Live lists the proxies whose last heartbeat is recent enough (a few
	// heartbeat intervals), self included once it has beaten.
	Live(ctx context.Context) ([]Peer, error)
}

// MemPeers is Peers in memory: the proxies of one process. An entry whose
// last heartbeat is older than TTL is not live. The zero value uses
// DefaultPeerTTL and time.Now.
type MemPeers struct {
	// TTL is how long a heartbeat keeps a proxy live.
	TTL time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time

	mu   sync.Mutex
	seen map[string]memPeer // by ID
}

type memPeer struct {
	p  Peer
	at time.Time
}

// Default announcer timings: a proxy beats every DefaultPeerHeartbeat and
// is live for DefaultPeerTTL after its last beat, three beats, so that one
// late write does not make a healthy proxy vanish from every worker.
const (
	DefaultPeerHeartbeat = 5 * time.Second
	DefaultPeerTTL       = 3 * DefaultPeerHeartbeat
)

func (m *MemPeers) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// Heartbeat records self as live now.
func (m *MemPeers) Heartbeat(_ context.Context, self Peer) error {
	if self.ID == "" {
		return errors.New("peers: heartbeat without an id")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen == nil {
		m.seen = make(map[string]memPeer)
	}
	m.seen[self.ID] = memPeer{p: self, at: m.now()}
	return nil
}

// Live lists the peers seen within TTL, by ID.
func (m *MemPeers) Live(context.Context) ([]Peer, error) {
	ttl := cmp.Or(m.TTL, DefaultPeerTTL)
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Peer
	for id, e := range m.seen {
		if now.Sub(e.at) > ttl {
			delete(m.seen, id)
			continue
		}
		out = append(out, e.p)
	}
	slices.SortFunc(out, func(a, b Peer) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// Announcer is the proxy's side of peer discovery: it beats for Self in
// Peers every Interval, reads the live list back, and tells every worker
// of Server the addresses to dial whenever that list changes; OnConnect
// tells a worker that just connected. Build it, set it as (part of) the
// Server's OnConnect, and Run it.
type Announcer struct {
	Peers  Peers
	Self   Peer
	Server *Server
	// Interval is the heartbeat (0: DefaultPeerHeartbeat). Stale is how
	// long the proxy may go without a successful heartbeat before Ready
	// fails (0: DefaultPeerTTL).
	Interval, Stale time.Duration
	Logger          *slog.Logger

	mu     sync.Mutex
	list   PeerList
	lastOK time.Time
	err    error
}

// Run beats and announces until ctx ends. The first beat is immediate.
func (a *Announcer) Run(ctx context.Context) {
	t := time.NewTicker(cmp.Or(a.Interval, DefaultPeerHeartbeat))
	defer t.Stop()
	for {
		a.beat(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// beat runs one round: heartbeat, read the live list, broadcast a change.
// A failed read keeps the last list: the workers keep their tunnels rather
// than drop them on the proxy's own trouble.
func (a *Announcer) beat(ctx context.Context) {
	log := logger(a.Logger)
	bctx, cancel := context.WithTimeout(ctx, cmp.Or(a.Interval, DefaultPeerHeartbeat))
	defer cancel()
	err := a.Peers.Heartbeat(bctx, a.Self)
	var live []Peer
	if err == nil {
		live, err = a.Peers.Live(bctx)
	}
	if err != nil {
		a.mu.Lock()
		a.err = err
		a.mu.Unlock()
		if ctx.Err() == nil {
			log.Warn("peers: heartbeat failed; workers keep the last list", "err", err)
		}
		return
	}
	var dial []Peer
	for _, p := range live {
		if p.Addr != "" && ValidPeerAddr(p.Addr) == nil {
			dial = append(dial, p)
		}
	}
	slices.SortFunc(dial, func(a, b Peer) int { return cmp.Or(cmp.Compare(a.Addr, b.Addr), cmp.Compare(a.ID, b.ID)) })
	if len(dial) > MaxPeers {
		dial = dial[:MaxPeers]
	}
	a.mu.Lock()
	a.lastOK, a.err = time.Now(), nil
	changed := !slices.Equal(dial, a.list.Peers) || a.list.Rev == 0
	if changed {
		a.list = PeerList{Rev: a.list.Rev + 1, Peers: dial}
	}
	l := a.list
	a.mu.Unlock()
	if !changed || a.Server == nil {
		return
	}
	log.Info("peers: live proxies changed", "peers", len(dial), "rev", l.Rev)
	m, err := NewPeersMessage(l)
	if err != nil {
		log.Error("peers: list not sent", "err", err)
		return
	}
	// Bounded: a wedged worker must not hold up the next beat. Broadcast
	// drops a worker it cannot tell; it gets the list when it reconnects.
	sctx, cancel := context.WithTimeout(ctx, a.Server.Timing.withDefaults().PeerTimeout)
	defer cancel()
	if err := a.Server.Broadcast(sctx, "", m); err != nil && ctx.Err() == nil {
		log.Warn("peers: list not delivered to every worker; those were dropped", "err", err)
	}
}

// OnConnect tells w the current list. Workers that connect before the
// first heartbeat get an empty list, and the next change when it comes.
// w is the worker's control stream (a *Worker).
func (a *Announcer) OnConnect(ctx context.Context, w interface {
	Send(context.Context, Message) error
}) error {
	a.mu.Lock()
	l := a.list
	a.mu.Unlock()
	m, err := NewPeersMessage(l)
	if err != nil {
		return err
	}
	return w.Send(ctx, m)
}

// List returns the list last announced.
func (a *Announcer) List() PeerList {
	a.mu.Lock()
	defer a.mu.Unlock()
	return PeerList{Rev: a.list.Rev, Peers: slices.Clone(a.list.Peers)}
}

// Ready reports nil while the proxy's own heartbeat is recent: a proxy that
// cannot record itself in the store is missing from every other proxy's
// list, and is not in a state to serve.
func (a *Announcer) Ready() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	stale := cmp.Or(a.Stale, DefaultPeerTTL)
	switch {
	case a.lastOK.IsZero() && a.err == nil:
		return errors.New("peers: no heartbeat yet")
	case a.lastOK.IsZero() || time.Since(a.lastOK) > stale:
		return fmt.Errorf("peers: no heartbeat recorded for %s: %v", stale, a.err)
	}
	return nil
}
