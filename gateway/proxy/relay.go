package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/grant"
	"github.com/limenhq/limen/gateway/kpath"
	"github.com/limenhq/limen/gateway/relay"
	"github.com/limenhq/limen/gateway/reqinfo"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/stream"
	"github.com/limenhq/limen/gateway/stream/decode"
	"github.com/limenhq/limen/gateway/tunnel"
)

type relayKey struct{}

// relayState is what one request carries to the stream transport.
type relayState struct {
	conn  net.Conn
	token []byte
	// grant is what the proxy signed and request this stream's own facts
	// (session, client address): the only source of the principal,
	// cluster and session of the worker's event (requestEvent).
	grant   grant.Grant
	request grant.Request
	path    kpath.Path     // below /k8s/CLUSTER
	live    *sessions.Live // nil for short requests
	// streamed: the request opens a stream (sessions.Classify), whose
	// every read is relayed at once; any other body moves in large writes.
	streamed bool
	// w is the client's ResponseWriter, hijacked for an upgrade.
	w http.ResponseWriter
	// sent is the proxy's record of the request (audit.TypeKubeSent),
	// made durable while the request travels.
	sent audit.Event
}

// sentEvent is the proxy's record of a request it is about to forward:
// everything it knows before the API server answers, from its own grant and
// classification (info, nil when the classifier cannot read the request).
func sentEvent(r *http.Request, now time.Time, path kpath.Path, info *reqinfo.Info, g grant.Grant, sr grant.Request) audit.Event {
	k := &audit.KubeRequest{Method: r.Method, Path: audit.RequestPath(path.String())}
	if info != nil {
		k.Verb, k.APIGroup, k.APIVersion, k.Resource = info.Verb, info.APIGroup, info.APIVersion, info.Resource
		k.Subresource, k.Namespace, k.Name, k.Path = info.Subresource, info.Namespace, info.Name, path.String()
	}
	return audit.Event{Type: audit.TypeKubeSent, Time: now, Principal: g.Principal, Groups: g.Groups, Cluster: g.Cluster,
		SessionID: sr.SessionID, ClientAddr: sr.ClientAddr, Kube: k}
}

// toWorker points out at the worker: the path below /k8s/CLUSTER, byte for
// byte as the proxy parsed it, on the tunnel stream's stand-in host.
func (st *relayState) toWorker(out *http.Request) {
	out.URL.Scheme, out.URL.Host = "http", "worker"
	st.path.SetURL(out.URL)
	out.Host = "worker"
}

// errAuditUnavailable marks a response dropped because its audit event could
// not be stored: the user gets 503 and nothing of the response.
var errAuditUnavailable = errors.New("audit trail unavailable")

// errWorkerRefused marks a worker's answer the proxy refused: an event it
// may not send, or a response head too large or too slow. The user gets 502
// and nothing of the response, and nothing is stored.
var errWorkerRefused = errors.New("the worker's answer was refused")

// errUpgraded tells the ErrorHandler that ModifyResponse relayed an
// upgraded connection to its end: there is nothing left to answer.
var errUpgraded = errors.New("upgraded connection relayed")

func (k *Kube) relayProxy() *httputil.ReverseProxy {
	k.relayOnce.Do(k.newRelay)
	return k.relay
}

func (k *Kube) newRelay() {
	k.relay = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.In.Context().Value(relayKey{}).(*relayState).toWorker(pr.Out)
		},
		Transport:     streamTransport{k: k},
		FlushInterval: -1,
		// The HTTP/2 response writer sends 4 KiB at a time, so a larger
		// copy buffer gains nothing; an idle watch holds this one all its
		// life.
		BufferPool:     copyBuffers{},
		ErrorLog:       nil,
		ModifyResponse: k.relayResponse, // streamed.go
		ErrorHandler:   k.relayError,
	}
}

// relayError answers a request whose relay failed with err, as the
// ReverseProxy's ErrorHandler and for a stream relayed without it
// (relayStream).
func (k *Kube) relayError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errUpgraded) {
		return
	}
	if errors.Is(err, errAuditUnavailable) {
		k.Logger.ErrorContext(r.Context(), "audit unavailable: response dropped", "err", err)
		writeStatus(w, http.StatusServiceUnavailable, auditDownMessage(err, "the response was dropped"))
		return
	}
	if errors.Is(err, context.Canceled) {
		return // the client went away
	}
	if errors.Is(err, errWorkerRefused) {
		st := r.Context().Value(relayKey{}).(*relayState)
		k.Logger.WarnContext(r.Context(), "worker answer refused", "cluster", st.grant.Cluster, "session", st.request.SessionID,
			"path", st.path.String(), "err", err)
		writeStatus(w, http.StatusBadGateway, "Limen refused the worker's answer, so the response was dropped; ask your operator to check the worker of cluster "+st.grant.Cluster)
		return
	}
	k.Logger.WarnContext(r.Context(), "relay to worker", "err", err)
	writeStatus(w, http.StatusBadGateway, "the request to the Limen worker failed: "+err.Error())
}

// copyBuffers lends the relay's response copy buffers from a pool.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { b := make([]byte, 4<<10); return &b }}

func (copyBuffers) Get() []byte  { return *copyBufferPool.Get().(*[]byte) }
func (copyBuffers) Put(b []byte) { copyBufferPool.Put(&b) }

// relayUpgrade relays a 101 from the worker in place of ReverseProxy,
// which would close both connections as soon as one direction ends and so
// cut the other: the client's connection is hijacked and relay.Run passes
// each direction's end on as a half-close, closing both only when both are
// done or the session ends (lock, kill, expiry, client gone). It returns
// errUpgraded once the stream is over, and any other error before the
// client's connection was taken, for the ErrorHandler to answer.
func (k *Kube) relayUpgrade(resp *http.Response) error {
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return nil
	}
	st := resp.Request.Context().Value(relayKey{}).(*relayState)
	body, ok := resp.Body.(*streamBody)
	if !ok {
		return errors.New("internal error: 101 response without its tunnel stream")
	}
	want, got := resp.Request.Header.Get("Upgrade"), resp.Header.Get("Upgrade")
	if !strings.EqualFold(want, got) || strings.ContainsFunc(got, func(r rune) bool { return r < ' ' || r > '~' }) {
		return fmt.Errorf("the worker switched to protocol %q when %q was requested", got, want)
	}
	conn, brw, err := http.NewResponseController(st.w).Hijack()
	if err != nil {
		return fmt.Errorf("switch protocols: %w", err)
	}
	resp.Body = nil // so Write sends only the head
	err = resp.Write(brw)
	// ReverseProxy closes the body of a response ModifyResponse refused;
	// the stream itself is closed by the relay.
	resp.Body = http.NoBody
	if err == nil {
		err = brw.Flush()
	}
	if err != nil {
		_ = conn.Close()
		_ = body.Close()
		return errUpgraded // the client is gone; nothing can be answered
	}
	body.upgraded = true
	client := gatheredConn{Conn: relay.NetConn(conn, brw.Reader), w: tunnel.GatherWrites(conn)}
	// An end from outside (a lock, a kill, the grant's expiry) first tells
	// the client why, then closes both connections. The worker tells it
	// too, but its word may not cross the tunnel before this hop closes it:
	// 194 of 200 WebSocket execs had only "close 1006", and every SPDY exec
	// a clean exit 0, after one lock over 1,000 streams (make crowd).
	ctx := resp.Request.Context()
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stopTell := context.AfterFunc(ctx, func() {
		body.tellEnd(client, conn, context.Cause(ctx))
		cancel()
	})
	defer stopTell()
	toClient := body.toClient(resp.Header, client, conn)
	relay.Run(rctx, client, body, body.fromClient, toClient)
	return errUpgraded
}

// gatheredConn is the client's side of an upgraded stream: each chunk
// relayed to the client reaches its socket in one system call, all its TLS
// records at once (tunnel.GatherWrites), instead of one per 16 KiB record.
type gatheredConn struct {
	relay.Conn
	w io.Writer
}

func (c gatheredConn) Write(p []byte) (int, error) { return c.w.Write(p) }

// tellTimeout bounds the write of the status that tells a client why its
// stream ends: a client that reads nothing must not delay the end.
const tellTimeout = 500 * time.Millisecond

// exitWatch notes the exit status of the exec or attach the proxy relays:
// after it, nothing more may be said to the client.
type exitWatch struct {
	stream.NopHandler
	seen atomic.Bool
}

func (e *exitWatch) Exit(stream.ExitStatus) error { e.seen.Store(true); return nil }

// toClient is the flow of an upgraded stream's bytes from the worker to the
// client. For an exec or attach it follows the frames (decode, the
// worker's decoders, fed a copy of the bytes, never changing them), so
// that when the stream ends under the client between two frames — the
// tunnel dying under it, or a lock, kill or expiry at this hop — the client
// gets a failure status that says why (tell), where kubectl would otherwise
// print only a broken connection or, over SPDY, exit 0. A stream it cannot
// follow (port-forward, a protocol it cannot decode, a decoder that refuses
// the bytes) is copied as it is, and its client learns of the end from the
// connection alone.
func (b *streamBody) toClient(hdr http.Header, client io.Writer, conn net.Conn) relay.Flow {
	exits := &exitWatch{}
	pair, err := decode.ForResponse(hdr, exits)
	if err == nil && !strings.Contains(pair.Protocol, "portforward") {
		b.pair, b.exits = pair, exits
	}
	return func(dst io.Writer, src io.Reader) error {
		buf := make([]byte, 64<<10)
		for {
			n, rerr := src.Read(buf)
			if n > 0 {
				if err := b.relayChunk(dst, buf[:n]); err != nil {
					return err
				}
			}
			if rerr == nil {
				continue
			}
			if lost := b.lostErr(rerr); lost != nil {
				b.live.LoseAfter(lost, func() { b.tell(client, conn, "Limen: "+lost.Error()) })
			}
			if rerr == io.EOF {
				return nil
			}
			return rerr
		}
	}
}

// fromClient is the flow of an upgraded stream's bytes from the client to
// the worker. For an exec or attach it follows the frames too: over SPDY the
// client opens the error stream, and a failure status can only be told on
// it (tell) once this hop has seen which one it is.
func (b *streamBody) fromClient(dst io.Writer, src io.Reader) error {
	buf := make([]byte, 32<<10)
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			b.follow(buf[:n])
			if _, err := dst.Write(buf[:n]); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// follow feeds the client's bytes p to the client decoder; one it refuses
// ends the following of both directions (the bytes are relayed still).
func (b *streamBody) follow(p []byte) {
	b.wmu.Lock()
	pair := b.pair
	b.wmu.Unlock()
	if pair == nil {
		return
	}
	if _, err := pair.Client.Write(p); err != nil {
		b.wmu.Lock()
		b.pair = nil
		b.wmu.Unlock()
	}
}

// relayChunk passes p on to the client, following its frames; nothing
// after the client was told the stream ends.
func (b *streamBody) relayChunk(dst io.Writer, p []byte) error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	if b.told {
		return errTold
	}
	if b.pair != nil {
		if _, err := b.pair.Server.Write(p); err != nil {
			b.pair = nil // follow no further; relay on
		}
	}
	_, err := dst.Write(p)
	return err
}

// errTold ends the flow of a stream whose client was told it ended.
var errTold = errors.New("the client was told the stream ended")

// tellEnd tells the client of a session this hop ended from outside (a
// lock, a kill, the grant's expiry, a shutdown, a stale lock view: cause is
// a *sessions.Ended) why. The client's own end and the stream's are not
// told, and a lost worker is told by toClient.
func (b *streamBody) tellEnd(client io.Writer, conn net.Conn, cause error) {
	var ended *sessions.Ended
	if !errors.As(cause, &ended) {
		return
	}
	switch ended.Reason {
	case sessions.ReasonClientClosed, sessions.ReasonCompleted, sessions.ReasonWorkerLost:
		return
	}
	b.tell(client, conn, "Limen: "+ended.Error())
}

// tell writes a failure status saying msg to the client, once, only
// between two frames and before the command's exit status.
func (b *streamBody) tell(client io.Writer, conn net.Conn, msg string) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	if b.told || b.pair == nil || b.exits.seen.Load() || b.pair.Server.Pending() != 0 {
		return
	}
	b.told = true
	if f := b.pair.Failure(msg); f != nil {
		_ = conn.SetWriteDeadline(time.Now().Add(tellTimeout))
		_, _ = client.Write(f)
	}
}

// streamTransport sends one request over its tunnel stream and relays the
// answer only once the proxy's record of the request is durable. The record
// (kube.sent) is queued for the store's next group commit before the
// request leaves, so its commit overlaps the round trip to the API server
// instead of following it. Then the worker's audit event and the response
// head are read (readHead); the response is relayed once the record is
// durable, and the worker's event, the request's outcome, is appended
// behind it without waiting: a proxy that stops before it is stored leaves a
// kube.sent without outcome, which Search flags (audit.Event.OutcomeUnknown).
type streamTransport struct{ k *Kube }

func (t streamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	st, ok := req.Context().Value(relayKey{}).(*relayState)
	if !ok {
		return nil, errors.New("no tunnel stream for this request")
	}
	conn := st.conn
	// An idle watch never writes: close the stream when the client leaves.
	stop := context.AfterFunc(req.Context(), func() { conn.Close() })
	fail := func(err error) (*http.Response, error) {
		stop()
		conn.Close()
		return nil, err
	}
	record := audit.Submit(req.Context(), t.k.Audit, st.sent)
	// Grant, request preamble and request head leave in one write: one
	// tunnel frame, one TLS record, for a request without a body.
	if err := writeRequest(conn, st, req); err != nil {
		return fail(err)
	}
	br, ev, resp, err := t.k.readHead(conn, req, st.grant, st.request)
	if err != nil {
		return fail(err)
	}
	// No byte of the response before the record of its request is durable.
	// The span shows what is left of the commit once the answer is here.
	_, span := t.k.step(req.Context(), "limen.proxy.audit.wait")
	err = record.Wait(req.Context())
	span.End()
	if err != nil {
		return fail(fmt.Errorf("%w: %w", errAuditUnavailable, err))
	}
	// The outcome is stored only with the head it belongs to (a worker
	// that forges either leaves none), and in the order submitted, so it
	// never lands before its record. Its commit is not waited for (it
	// shares the next record's, audit.Store.Append): the store logs a
	// failure, and the record stays flagged.
	audit.Append(context.WithoutCancel(req.Context()), t.k.Audit, ev)
	body := &streamBody{r: br, conn: conn, stop: stop, live: st.live, cluster: st.grant.Cluster}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body = body // the stream is now raw bytes both ways
		return resp, nil
	}
	body.r = resp.Body
	resp.Body = body
	return resp, nil
}

// requestWriters are the buffers a request leaves the proxy through,
// borrowed only while it is written.
var requestWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}

// writeRequest writes the stream's grant, request preamble and req to conn.
// A request body larger than the buffer goes on in the buffer's size.
func writeRequest(conn net.Conn, st *relayState, req *http.Request) error {
	bw := requestWriters.Get().(*bufio.Writer)
	bw.Reset(conn)
	defer func() { bw.Reset(nil); requestWriters.Put(bw) }()
	if err := grant.WritePreamble(bw, st.token); err != nil {
		return fmt.Errorf("write grant: %w", err)
	}
	if err := grant.WriteRequest(bw, st.request); err != nil {
		return fmt.Errorf("write request preamble: %w", err)
	}
	if err := req.Write(bw); err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	return nil
}

// Bounds on a worker's answer once it starts (Kube.WorkerHeadTimeout,
// Kube.MaxWorkerHeadBytes). The worker writes its event and the head back to
// back, so a generous bound costs an honest worker nothing. The head's size
// is Go's own default limit for request heads.
const (
	DefaultWorkerHeadTimeout  = 30 * time.Second
	DefaultMaxWorkerHeadBytes = http.DefaultMaxHeaderBytes
)

// readHead reads the worker's answer to req up to the response body: the
// audit event, checked against the grant g (requestEvent), then the
// response head. Until the answer's first byte there is no deadline: the
// worker sends its event only once the API server answered, which for a
// followed log of a silent container is whenever it first logs (the
// kubelet sends its head with the first line), and the client's leaving
// closes the stream. From the first byte on, the event and head must come
// within WorkerHeadTimeout and MaxWorkerHeadBytes. It returns the reader
// the body continues on.
func (k *Kube) readHead(conn net.Conn, req *http.Request, g grant.Grant, sr grant.Request) (*bufio.Reader, audit.Event, *http.Response, error) {
	timeout, maxHead := k.WorkerHeadTimeout, k.MaxWorkerHeadBytes
	if timeout <= 0 {
		timeout = DefaultWorkerHeadTimeout
	}
	if maxHead <= 0 {
		maxHead = DefaultMaxWorkerHeadBytes
	}
	lim := &headLimit{r: conn, left: int64(4 + audit.MaxWireSize + maxHead)}
	// Large reads bypass the buffer, and the head's lines need not fit in
	// it: 1 KiB is enough, and all an idle watch holds (streamed.go).
	br := bufio.NewReaderSize(lim, headBuffer)
	if _, err := br.Peek(1); err != nil {
		return nil, audit.Event{}, nil, fmt.Errorf("read audit event from worker: %w", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(timeout)) // the wall clock: Now may be a test's
	ev, err := audit.ReadEvent(br, 0)
	if err != nil {
		return nil, ev, nil, fmt.Errorf("read audit event from worker: %w", headErr(err, timeout, maxHead))
	}
	if ev, err = requestEvent(ev, g, sr); err != nil {
		return nil, ev, nil, fmt.Errorf("%w: %w", errWorkerRefused, err)
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, ev, nil, fmt.Errorf("read response: %w", headErr(err, timeout, maxHead))
	}
	_ = conn.SetReadDeadline(time.Time{})
	lim.lift()
	return br, ev, resp, nil
}

// headBuffer is the size of the buffer a worker's answer is read through.
const headBuffer = 1 << 10

// headErr names the bound a worker's answer broke, if it broke one.
func headErr(err error, timeout time.Duration, maxHead int) error {
	switch {
	case errors.Is(err, errHeadTooLarge):
		return fmt.Errorf("%w: the response head is over %d bytes", errWorkerRefused, maxHead)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w: the event and response head did not come within %s", errWorkerRefused, timeout)
	}
	return err
}

// errHeadTooLarge ends a worker's answer whose head passed its limit.
var errHeadTooLarge = errors.New("worker answer head too large")

// headLimit bounds the bytes read from a worker before the response body:
// past left it fails instead of reading on, until lift. Only the one
// goroutine reading the head uses it before lift, and only the body's
// reader after.
type headLimit struct {
	r      io.Reader
	left   int64
	lifted bool
}

func (l *headLimit) Read(p []byte) (int, error) {
	if l.lifted {
		return l.r.Read(p)
	}
	if l.left <= 0 {
		return 0, errHeadTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

func (l *headLimit) lift() { l.lifted = true }

// streamBody is a response body that owns its tunnel stream. After a 101 it
// is also the writable side of the upgraded connection.
type streamBody struct {
	r       io.Reader
	conn    net.Conn
	stop    func() bool
	live    *sessions.Live
	cluster string
	// upgraded: the relay's flow (toClient) ends the session when the
	// worker is lost, once it has told the client.
	upgraded bool
	once     sync.Once

	// Of an exec or attach (toClient): its frames, followed; its exit
	// status; and whether the client was told why the stream ended.
	wmu   sync.Mutex
	pair  *decode.Pair
	exits *exitWatch
	told  bool
}

func (b *streamBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if b.live != nil && n > 0 {
		b.live.AddBytes(0, int64(n))
	}
	if err != nil && !b.upgraded {
		b.lost(err)
	}
	return n, err
}

func (b *streamBody) Write(p []byte) (int, error) {
	n, err := b.conn.Write(p)
	if b.live != nil && n > 0 {
		b.live.AddBytes(int64(n), 0)
	}
	if err != nil && !b.upgraded {
		b.lost(err)
	}
	return n, err
}

// lost ends the session as worker_lost when err says the tunnel under the
// stream died: the worker that relayed it crashed or cannot be reached, so
// it will not report the end, and the proxy records it (Kube.untrack).
func (b *streamBody) lost(err error) {
	if lost := b.lostErr(err); lost != nil {
		b.live.Lose(lost)
	}
}

// lostErr is the end of a tracked session whose tunnel died with err, in
// words for its user; nil when err is not that.
func (b *streamBody) lostErr(err error) error {
	if b.live == nil || !errors.Is(err, tunnel.ErrTunnelClosed) {
		return nil
	}
	return fmt.Errorf("the worker of cluster %s was lost mid-stream (it stopped, or the network to it failed); run the command again: %w", b.cluster, err)
}

// CloseWrite half-closes the tunnel stream: the worker reads the end of
// the client's bytes, and the worker's keep coming.
func (b *streamBody) CloseWrite() error { return relay.CloseWrite(b.conn) }

func (b *streamBody) Close() error {
	var err error
	b.once.Do(func() {
		b.stop()
		if c, ok := b.r.(io.Closer); ok {
			_ = c.Close()
		}
		err = b.conn.Close()
	})
	return err
}
