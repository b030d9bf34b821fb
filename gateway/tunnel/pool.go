package tunnel

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"
)

// Pool is the worker's set of tunnels, one per proxy address: Addr (the
// address it was enrolled with, usually a load balancer) always, and one
// per address the proxies advertise (TypePeers), dialed directly. Each is a
// Client with its own jittered backoff; a tunnel to an address no connected
// proxy advertises any more is stopped. Every tunnel serves request streams
// with Handler, so a request landing on any live proxy reaches this worker.
//
// Send, Request and OpenStream pick a tunnel: the one a message came in on
// when ctx is one a Pool hook or Handler was given (a reply, a live view),
// otherwise Addr's tunnel when it is up, otherwise any tunnel that is.
//
// Fill in the fields, then call Run. A Pool must not be copied after first
// use.
type Pool struct {
	// Addr is the enrolled proxy address; its tunnel is never stopped.
	Addr string
	// TLSConfig, Hello, Handler, OnMessage, OnConnect, Logger, Timing and
	// the backoff bounds are as in Client, shared by every tunnel.
	// OnMessage does not see TypePeers, which the Pool handles.
	TLSConfig                            *tls.Config
	Hello                                Hello
	Handler                              func(ctx context.Context, stream net.Conn)
	OnMessage                            func(ctx context.Context, m Message)
	OnConnect                            func(ctx context.Context, ack HelloAck)
	Logger                               *slog.Logger
	Timing                               Timing
	MinBackoff, MaxBackoff, HealthyAfter time.Duration
	// JoinSpread is the window over which the first dial to a newly
	// advertised proxy is spread at random (0: DefaultJoinSpread), so that
	// a proxy that (re)starts is not met by every worker at once.
	JoinSpread time.Duration

	mu    sync.Mutex
	ctx   context.Context // Run's; nil before Run
	wg    sync.WaitGroup
	links map[string]*link                   // by address
	lists map[*Client]PeerList               // the last list each connected tunnel's proxy sent
	dials func(addr string, d time.Duration) // for tests: each tunnel started
}

// DefaultJoinSpread is the window over which a worker's first dial to a new
// proxy falls.
const DefaultJoinSpread = 2 * time.Second

type link struct {
	c      *Client
	cancel context.CancelFunc
}

// Run keeps the tunnels up until ctx ends and returns ctx's error once
// every tunnel has stopped.
func (p *Pool) Run(ctx context.Context) error {
	first := p.newClient(p.Addr, 0)
	if err := first.check(); err != nil {
		return err
	}
	p.mu.Lock()
	p.ctx = ctx
	p.links = map[string]*link{}
	p.lists = map[*Client]PeerList{}
	p.startLocked(first)
	p.mu.Unlock()
	<-ctx.Done()
	p.wg.Wait()
	return ctx.Err()
}

// newClient builds the tunnel to addr.
func (p *Pool) newClient(addr string, delay time.Duration) *Client {
	c := &Client{Addr: addr, TLSConfig: p.TLSConfig, Hello: p.Hello, Handler: p.Handler, OnConnect: p.OnConnect,
		Logger: p.Logger, Timing: p.Timing, MinBackoff: p.MinBackoff, MaxBackoff: p.MaxBackoff,
		HealthyAfter: p.HealthyAfter, startDelay: delay}
	c.Hello.Link = addr
	c.OnMessage = func(ctx context.Context, m Message) {
		if m.Type == TypePeers {
			p.peers(c, m)
			return
		}
		if p.OnMessage != nil {
			p.OnMessage(ctx, m)
		}
	}
	c.onDown = func() { p.down(c) }
	return c
}

// startLocked runs c until its link is stopped or Run's ctx ends.
func (p *Pool) startLocked(c *Client) {
	ctx, cancel := context.WithCancel(p.ctx)
	p.links[c.Addr] = &link{c: c, cancel: cancel}
	if p.dials != nil {
		p.dials(c.Addr, c.startDelay)
	}
	p.wg.Go(func() {
		defer cancel()
		_ = c.Run(ctx)
	})
}

// peers takes a proxy's list, from tunnel c, and reconciles.
func (p *Pool) peers(c *Client, m Message) {
	l, err := DecodePeers(m)
	if err != nil {
		logger(p.Logger).Warn("tunnel: peer list refused", "proxy", c.Addr, "err", err)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.lists[c]; ok && l.Rev < old.Rev {
		return // overtaken by a newer list on the same session
	}
	p.lists[c] = l
	p.reconcileLocked()
}

// down forgets what tunnel c's proxy said, once its session ended.
func (p *Pool) down(c *Client) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.lists, c)
	p.reconcileLocked()
}

// reconcileLocked makes the tunnels the union of the lists the connected
// proxies sent, plus Addr. With no list at all (every tunnel down) nothing
// changes: knowing nothing is no reason to stop dialing.
func (p *Pool) reconcileLocked() {
	if p.ctx == nil || p.ctx.Err() != nil || len(p.lists) == 0 {
		return
	}
	want := map[string]bool{p.Addr: true}
	for _, l := range p.lists {
		for _, peer := range l.Peers {
			want[peer.Addr] = true
		}
	}
	log := logger(p.Logger)
	for addr, l := range p.links {
		if !want[addr] {
			log.Info("tunnel: proxy no longer advertised; closing its tunnel", "proxy", addr)
			l.cancel()
			delete(p.links, addr)
		}
	}
	for addr := range want {
		if p.links[addr] == nil && len(p.links) < MaxPeers+1 {
			d := p.spread()
			log.Info("tunnel: proxy advertised; opening a tunnel", "proxy", addr, "in", d.Round(time.Millisecond))
			p.startLocked(p.newClient(addr, d))
		}
	}
}

func (p *Pool) spread() time.Duration {
	return time.Duration(rand.Int64N(int64(cmp.Or(p.JoinSpread, DefaultJoinSpread))))
}

// Addrs lists the addresses of the tunnels the pool keeps, up or not,
// sorted.
func (p *Pool) Addrs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for a := range p.links {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// ConnectedAddrs lists the addresses whose tunnel is up, sorted.
func (p *Pool) ConnectedAddrs() []string {
	var out []string
	for _, c := range p.clients() {
		if c.Connected() {
			out = append(out, c.Addr)
		}
	}
	return out
}

// Connected reports whether any tunnel is up.
func (p *Pool) Connected() bool { return len(p.ConnectedAddrs()) > 0 }

// clients returns the tunnels, Addr's first, then by address.
func (p *Pool) clients() []*Client {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*Client, 0, len(p.links))
	for _, l := range p.links {
		out = append(out, l.c)
	}
	slices.SortFunc(out, func(a, b *Client) int {
		if (a.Addr == p.Addr) != (b.Addr == p.Addr) {
			if a.Addr == p.Addr {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Addr, b.Addr)
	})
	return out
}

// pick chooses the tunnel for a message sent with ctx: the one ctx came
// from while it is up; else, unless the message must go back where it came
// from, the first that is up.
func (p *Pool) pick(ctx context.Context, mustReturn bool) (*Client, error) {
	if o := origin(ctx); o != nil && (mustReturn || o.Connected() && p.owns(o)) {
		return o, nil // a stopped tunnel fails the send: ErrNotConnected
	}
	for _, c := range p.clients() {
		if c.Connected() {
			return c, nil
		}
	}
	return nil, ErrNotConnected
}

func (p *Pool) owns(c *Client) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.links[c.Addr]
	return l != nil && l.c == c
}

// Send writes m on a tunnel's control stream (see Pool). A reply
// (ReplyTo set) goes only to the tunnel its request came in on: no other
// proxy knows its ID.
func (p *Pool) Send(ctx context.Context, m Message) error {
	c, err := p.pick(ctx, m.ReplyTo != 0)
	if err != nil {
		return err
	}
	return c.Send(ctx, m)
}

// Request sends m on a tunnel and waits for that proxy's reply.
func (p *Pool) Request(ctx context.Context, m Message) (Message, error) {
	c, err := p.pick(ctx, false)
	if err != nil {
		return Message{}, err
	}
	return c.Request(ctx, m)
}

// OpenStream opens a stream of kind on a tunnel. A stream opened with a
// hook's ctx (a live view a proxy asked for) goes only to that proxy.
func (p *Pool) OpenStream(ctx context.Context, kind string) (net.Conn, error) {
	c, err := p.pick(ctx, true)
	if err != nil {
		return nil, err
	}
	return c.OpenStream(ctx, kind)
}

// Drain tells every connected proxy this worker is stopping (Client.Drain)
// and returns the smallest number of other workers any of them reports:
// the worker may hand over only once every proxy has somewhere else to
// send new streams. It fails if no proxy answered.
func (p *Pool) Drain(ctx context.Context) (DrainAck, error) {
	var (
		mu   sync.Mutex
		best *DrainAck
		errs []error
		wg   sync.WaitGroup
	)
	for _, c := range p.clients() {
		if !c.Connected() {
			continue
		}
		wg.Go(func() {
			ack, err := c.Drain(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", c.Addr, err))
				return
			}
			if best == nil || ack.Others < best.Others {
				best = &ack
			}
		})
	}
	wg.Wait()
	if best == nil {
		if len(errs) == 0 {
			return DrainAck{}, ErrNotConnected
		}
		return DrainAck{}, errors.Join(errs...)
	}
	return *best, nil
}
