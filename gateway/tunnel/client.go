package tunnel

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// Client is the worker side of the tunnel. Fill in the fields, then call Run;
// Send and Request may be called from any goroutine while Run is running.
// A Client must not be copied after first use.
type Client struct {
	// Addr is the proxy's host:port.
	Addr string
	// TLSConfig carries the worker's enrollment certificate and the roots
	// that verify the proxy. It is cloned; ALPN and TLS 1.3 are forced.
	TLSConfig *tls.Config
	// Hello identifies this worker; Cluster and WorkerID are required.
	Hello Hello
	// Handler serves one data stream (one HTTP request from the proxy). It
	// runs in its own goroutine; ctx ends when the tunnel drops or Run
	// returns, and the stream is closed after Handler returns.
	Handler func(ctx context.Context, stream net.Conn)
	// OnMessage receives caller-defined control messages in order. It runs
	// on the control loop: while it blocks, no control message is read, so
	// long work must be handed off.
	OnMessage func(ctx context.Context, m Message)
	// OnConnect, if set, runs after each successful hello exchange, before
	// data streams are served. Control messages may already be arriving.
	OnConnect func(ctx context.Context, ack HelloAck)
	// Logger receives connection events; nil discards them.
	Logger *slog.Logger
	// Timing tunes heartbeats and timeouts.
	Timing Timing
	// MinBackoff, MaxBackoff bound the jittered delay between reconnects;
	// HealthyAfter is how long a session must last to reset the delay.
	MinBackoff, MaxBackoff, HealthyAfter time.Duration

	// startDelay, when set, is waited before the first dial (Pool: a new
	// peer's tunnels spread over a window instead of arriving at once);
	// onDown runs after each session that passed the hello ends (Pool).
	startDelay time.Duration
	onDown     func()

	mu   sync.Mutex
	ctrl *control       // current session's control stream, nil when down
	sess *yamux.Session // current session, nil when down
}

// originKey is the context key under which a session's contexts (those
// of Handler, OnMessage and OnConnect) carry their Client, so that a Pool
// answers on the tunnel a message came from.
type originKey struct{}

func origin(ctx context.Context) *Client {
	c, _ := ctx.Value(originKey{}).(*Client)
	return c
}

// Run keeps the tunnel up until ctx ends, reconnecting with backoff, and
// returns ctx's error. Every goroutine it starts, data stream handlers
// included, has finished when it returns.
func (c *Client) Run(ctx context.Context) error {
	if err := c.check(); err != nil {
		return err
	}
	log := logger(c.Logger).With("proxy", c.Addr, "cluster", c.Hello.Cluster)
	bo := backoff{min: orDefault(c.MinBackoff, DefaultMinBackoff), max: orDefault(c.MaxBackoff, DefaultMaxBackoff)}
	healthy := orDefault(c.HealthyAfter, DefaultHealthyAfter)
	var handlers sync.WaitGroup
	defer handlers.Wait()
	if c.startDelay > 0 {
		t := time.NewTimer(c.startDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	for {
		start := time.Now()
		err := c.session(ctx, log, &handlers)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Since(start) >= healthy {
			bo.reset()
		}
		delay := bo.next()
		log.Warn("tunnel: disconnected", "err", err, "retry_in", delay.Round(time.Millisecond))
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (c *Client) check() error {
	switch {
	case c.Addr == "":
		return errors.New("tunnel client: Addr is required")
	case c.TLSConfig == nil:
		return errors.New("tunnel client: TLSConfig is required")
	case c.Handler == nil:
		return errors.New("tunnel client: Handler is required")
	}
	return c.Hello.validate()
}

// Connected reports whether a session is up and past the hello exchange.
func (c *Client) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ctrl != nil
}

// Send writes m on the current session's control stream.
func (c *Client) Send(ctx context.Context, m Message) error {
	ctrl := c.current()
	if ctrl == nil {
		return ErrNotConnected
	}
	_, err := ctrl.send(ctx, m)
	return err
}

// Request sends m and waits for the proxy's reply (a message whose ReplyTo
// is m's ID), for uploads that need an acknowledgement.
func (c *Client) Request(ctx context.Context, m Message) (Message, error) {
	ctrl := c.current()
	if ctrl == nil {
		return Message{}, ErrNotConnected
	}
	return ctrl.request(ctx, m)
}

func (c *Client) current() *control {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ctrl
}

func (c *Client) setCurrent(ctrl *control, sess *yamux.Session) {
	c.mu.Lock()
	c.ctrl, c.sess = ctrl, sess
	c.mu.Unlock()
}

// dial opens the TLS connection and checks the negotiated protocol.
func (c *Client) dial(ctx context.Context, t Timing) (*tls.Conn, error) {
	cfg := c.TLSConfig.Clone()
	cfg.NextProtos = []string{ALPN}
	cfg.MinVersion = tls.VersionTLS13
	dctx, cancel := context.WithTimeout(ctx, t.Handshake)
	defer cancel()
	nd := &net.Dialer{KeepAlive: t.Heartbeat}
	raw, err := nd.DialContext(dctx, "tcp", c.Addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", c.Addr, err)
	}
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(c.Addr); err == nil {
			cfg.ServerName = host // what tls.Dialer would verify
		}
	}
	conn := tls.Client(NewGatherConn(raw), cfg)
	if err := conn.HandshakeContext(dctx); err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("dial %s: %w", c.Addr, err)
	}
	if p := conn.ConnectionState().NegotiatedProtocol; p != ALPN {
		_ = conn.Close()
		return nil, fmt.Errorf("dial %s: proxy negotiated ALPN %q, want %q", c.Addr, p, ALPN)
	}
	return conn, nil
}

// session runs one connection from dial to drop.
func (c *Client) session(ctx context.Context, log *slog.Logger, handlers *sync.WaitGroup) error {
	t := c.Timing.withDefaults()
	conn, err := c.dial(ctx, t)
	if err != nil {
		return err
	}
	sess, err := yamux.Server(newCoalescedConn(conn), yamuxConfig(t, log))
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("yamux: %w", err)
	}
	defer sess.Close()
	ctx, cancel := context.WithCancelCause(context.WithValue(ctx, originKey{}, c))
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() { _ = sess.Close() })
	defer stop()

	ctrl, ack, err := c.handshake(ctx, sess, t, log)
	if err != nil {
		return err
	}
	log = log.With("session", ack.SessionID, "proxy_id", ack.ProxyID)
	log.Info("tunnel: connected")
	if c.onDown != nil {
		defer c.onDown() // after the session is no longer current
	}
	c.setCurrent(ctrl, sess)
	defer c.setCurrent(nil, nil)

	var wg sync.WaitGroup
	var ctrlErr error
	wg.Go(func() { cancelOnClose(ctx, sess, cancel) })
	wg.Go(func() { ctrlErr = ctrl.run(ctx, c.OnMessage) })
	if c.OnConnect != nil {
		c.OnConnect(ctx, ack)
	}
	err = c.acceptLoop(ctx, sess, handlers)
	_ = sess.Close()
	cancel(err) // the streams' handlers see the tunnel closed (ErrTunnelClosed)
	wg.Wait()
	// The control stream usually knows why (a silent peer, a broken
	// write); the accept loop only sees the session end.
	if ctrlErr != nil && !errors.Is(ctrlErr, context.Canceled) {
		return ctrlErr
	}
	return err
}

// handshake accepts the proxy's control stream and exchanges hellos.
func (c *Client) handshake(ctx context.Context, sess *yamux.Session, t Timing, log *slog.Logger) (*control, HelloAck, error) {
	hctx, cancel := context.WithTimeout(ctx, t.Handshake)
	defer cancel()
	st, err := sess.AcceptStreamWithContext(hctx)
	if err != nil {
		return nil, HelloAck{}, fmt.Errorf("accept control stream: %w", err)
	}
	conn := newStream(st, nil)
	ctrl := newControl(conn, t, log, func() { _ = sess.Close() })
	hello, err := NewMessage(TypeHello, c.Hello)
	if err != nil {
		return nil, HelloAck{}, err
	}
	if _, err := ctrl.send(hctx, hello); err != nil {
		return nil, HelloAck{}, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(t.Handshake))
	b, err := ReadFrame(conn, MaxFrameSize)
	if err != nil {
		return nil, HelloAck{}, fmt.Errorf("read hello-ack: %w", err)
	}
	m, err := decodeMessage(b)
	if err != nil {
		return nil, HelloAck{}, fmt.Errorf("read hello-ack: %w", err)
	}
	var ack HelloAck
	switch m.Type {
	case TypeHelloAck:
		if err := m.Decode(&ack); err != nil {
			return nil, HelloAck{}, err
		}
		return ctrl, ack, nil
	case TypeRefused:
		var r Refusal
		_ = m.Decode(&r)
		return nil, HelloAck{}, fmt.Errorf("%w: %s", ErrRefused, r.Reason)
	}
	return nil, HelloAck{}, fmt.Errorf("%w: got %q before hello-ack", ErrBadMessage, m.Type)
}

// acceptLoop hands each data stream to Handler until the session ends.
func (c *Client) acceptLoop(ctx context.Context, sess *yamux.Session, handlers *sync.WaitGroup) error {
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			// yamux reports the connection's own error (often io.EOF).
			return fmt.Errorf("%w: %v", ErrTunnelClosed, err)
		}
		handlers.Go(func() {
			conn := newStream(st, nil)
			defer conn.Close()
			c.Handler(ctx, conn)
		})
	}
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
