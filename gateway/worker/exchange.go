package worker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/kreq"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/tunnel"
)

// exchange is one request on one stream.
type exchange struct {
	h      *Handler
	stream net.Conn
	br     *bufio.Reader
	req    *http.Request
	start  time.Time
	adm    admission
	info   *kreq.Info      // the request's classification, once made
	st     sessions.Stream // what the request opens (sessions.Classify)
}

func (x *exchange) event() audit.Event {
	g := x.adm.grant
	return audit.Event{
		Time: x.h.Now(), Principal: g.Principal, Groups: x.adm.groups, Cluster: x.h.Cluster.Name,
		SessionID: g.SessionID, ClientAddr: g.ClientAddr,
	}
}

// kubeEvent is the request's kube.request event with the given status: the
// classification once it is made, the raw path before.
func (x *exchange) kubeEvent(status int) audit.Event {
	ev := x.event()
	ev.Type = audit.TypeKubeRequest
	k := &audit.KubeRequest{Method: x.req.Method, Path: audit.RequestPath(x.req.RequestURI), Status: status,
		Latency: x.h.Now().Sub(x.start)}
	if i := x.info; i != nil {
		k.Verb, k.APIGroup, k.APIVersion, k.Resource = i.Verb, i.APIGroup, i.APIVersion, i.Resource
		k.Subresource, k.Namespace, k.Name, k.Path = i.Subresource, i.Namespace, i.Name, x.adm.path.String()
	}
	ev.Kube = k
	return ev
}

// refuse answers the request itself, after its audit event.
func (x *exchange) refuse(rf *refusal) {
	ev := x.kubeEvent(rf.code)
	if rf.reason != "" {
		ev = x.event()
		ev.Type = audit.TypeAuthDenied
		ev.Denied = &audit.Denied{Hop: audit.HopWorker, Reason: rf.reason, Path: audit.RequestPath(x.req.RequestURI)}
	}
	if err := audit.WriteEvent(x.stream, ev); err != nil {
		x.h.Logger.Warn("write audit event", "err", err)
		return
	}
	_ = writeStatusResponse(x.stream, rf.code, rf.msg)
}

// forward sends the request to the API server as the granted identity and
// relays the response after its audit event. A stream (exec, attach,
// port-forward, watch, followed logs, proxy) has its session.start stored,
// and exec and attach their recording open, before it goes upstream; its
// one session.end follows when it ends.
func (x *exchange) forward(ctx context.Context, cancel context.CancelFunc) {
	h := x.h
	info, err := kreq.Classify(x.req, x.adm.path)
	if err != nil {
		x.refuse(&refusal{code: http.StatusBadRequest, msg: "cannot classify the request: " + err.Error()})
		return
	}
	x.info = &info
	x.st = sessions.Classify(x.req, info)
	live, err := h.track(ctx, x)
	if err != nil {
		x.refuse(&refusal{http.StatusForbidden, err.Error(), "session refused: " + err.Error()})
		return
	}
	if live != nil {
		// Lock, kill or grant expiry ends the response at once, idle or
		// not, whatever its kind: the upstream request is cancelled and the
		// tunnel stream closed.
		defer live.End(sessions.ReasonCompleted)
		ctx = live.Context()
		stop := context.AfterFunc(ctx, func() { x.stream.Close() })
		defer stop() // before End: a response that completes keeps its stream
	}
	token, err := h.Token()
	if err != nil {
		h.Logger.Error("service account token unavailable", "err", err)
		x.refuse(&refusal{code: http.StatusServiceUnavailable, msg: "the Limen worker cannot read its ServiceAccount token; ask your operator"})
		return
	}
	g := x.adm.grant
	out := x.outbound(ctx)
	if err := kreq.Impersonate(out.Header, g.Principal.Name, x.adm.groups, g.SessionID); err != nil {
		x.refuse(&refusal{http.StatusForbidden, "Limen refuses to impersonate: " + err.Error(), "impersonation: " + err.Error()})
		return
	}
	out.Header.Set("Authorization", "Bearer "+token)
	upgrade := out.Header.Get("Upgrade") != ""
	var s *session
	if upgrade || x.st.Kind != sessions.KindNone {
		var rf *refusal
		if s, rf = x.openSession(ctx, upgrade); rf != nil {
			x.refuse(rf) // the API server never sees the request
			return
		}
		out.Body = s.countIn(out.Body)
	}
	rt := h.Transport
	var conn gotConn
	if upgrade {
		offerDecodable(out.Header) // stream.go
		rt = h.upgradeTransport()
		out = conn.trace(out)
	}
	resp, err := rt.RoundTrip(out)
	if err != nil {
		if s != nil {
			err := fmt.Errorf("request to the API server: %w", err)
			s.finish(ctx, outsideEnd(ctx, audit.EndUpstreamReset), err)
		}
		if ctx.Err() != nil {
			return // the proxy closed the stream
		}
		h.Logger.Warn("forward to API server", "err", err)
		x.refuse(&refusal{code: http.StatusBadGateway, msg: "the Limen worker could not reach the API server"})
		return
	}
	defer resp.Body.Close()
	ev := x.kubeEvent(resp.StatusCode)
	switch {
	case resp.StatusCode == http.StatusSwitchingProtocols && upgrade:
		x.upgrade(ctx, resp, conn.get(), s, ev) // stream.go: decode, record, relay, end the session
		return
	case resp.StatusCode == http.StatusSwitchingProtocols:
		if s != nil {
			s.finish(ctx, audit.EndError, errors.New("the API server switched protocols for a request that asked for no upgrade"))
		}
		x.refuseUpgrade(ev, http.StatusBadGateway, "the API server switched protocols for a request that asked for no upgrade")
		return
	case upgrade:
		// The API server refused the upgrade (no such pod, RBAC): the
		// session never started, and its answer is relayed as it is.
		s.finish(ctx, audit.EndNotStarted, fmt.Errorf("the API server answered %s", resp.Status))
		s = nil
	}
	// The event goes ahead of the response: the proxy stores it before it
	// relays a byte.
	if err := audit.WriteEvent(x.stream, ev); err != nil {
		if s != nil {
			s.finish(ctx, audit.EndTunnelClosed, fmt.Errorf("write kube.request to the proxy: %w", err))
		}
		return
	}
	// The request body is consumed: a read now returns only when the proxy
	// closes the stream, which ends an idle watch at once.
	go func() {
		_, _ = x.br.ReadByte()
		cancel()
	}()
	w := &countWriter{w: x.stream}
	if s != nil {
		w.n = &s.out
	}
	err = writeResponse(w, x.req.Method, resp)
	if err != nil && ctx.Err() == nil {
		h.Logger.Debug("relay response", "err", err)
	}
	if s != nil {
		s.finish(ctx, responseEnd(ctx, w, err), err)
	}
}

// responseEnd says how a relayed response ended (audit.End…), from the
// error that ended it.
func responseEnd(ctx context.Context, w *countWriter, err error) string {
	switch {
	case err == nil:
		return audit.EndCompleted
	case ctx.Err() != nil:
		return outsideEnd(ctx, audit.EndClientClosed)
	case w.err != nil:
		return audit.EndClientClosed
	}
	return audit.EndUpstreamReset
}

// outsideEnd is the reason a stream ended from outside the relay — a lock,
// a kill, the grant's expiry, the proxy closing the stream, the tunnel
// going away — or otherwise while ctx is live.
func outsideEnd(ctx context.Context, otherwise string) string {
	if ctx.Err() == nil {
		return otherwise
	}
	var ended *sessions.Ended
	switch cause := context.Cause(ctx); {
	case errors.As(cause, &ended):
		return string(ended.Reason)
	case errors.Is(cause, tunnel.ErrTunnelClosed):
		return audit.EndTunnelClosed
	}
	return audit.EndClientClosed
}

// countWriter counts the bytes written to the client and keeps the error
// of a failed write, which tells a client gone from an API server gone.
type countWriter struct {
	w   io.Writer
	n   *atomic.Int64 // nil: not counted
	err error
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if c.n != nil {
		c.n.Add(int64(n))
	}
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

// gotConn learns the connection an upgrade request went out on: the
// response body of a 101 hides it, and the relay needs it to half-close.
type gotConn struct {
	mu   sync.Mutex
	conn net.Conn
}

func (g *gotConn) trace(r *http.Request) *http.Request {
	return r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			g.mu.Lock()
			g.conn = i.Conn
			g.mu.Unlock()
		},
	}))
}

func (g *gotConn) get() net.Conn {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.conn
}

// outbound builds the request to the API server: the same method, canonical
// path, query and headers (already stripped of client identity), minus
// hop-by-hop headers.
func (x *exchange) outbound(ctx context.Context) *http.Request {
	out := x.req.Clone(ctx)
	out.RequestURI = ""
	u := *x.h.Upstream
	x.adm.path.SetURL(&u)
	u.RawQuery = x.req.URL.RawQuery
	out.URL, out.Host = &u, u.Host
	upgrade := x.req.Header.Get("Upgrade")
	for _, name := range hopHeaders {
		out.Header.Del(name)
	}
	if upgrade != "" {
		out.Header.Set("Connection", "Upgrade")
		out.Header.Set("Upgrade", upgrade)
	}
	return out
}

var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// writeResponse writes resp as HTTP/1.1, chunk by chunk as the body arrives,
// so watches and followed logs reach the user at once.
func writeResponse(w io.Writer, method string, resp *http.Response) error {
	noBody := method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
	if noBody || resp.ContentLength >= 0 {
		if err := writeHead(w, resp, resp.ContentLength, false); err != nil || noBody {
			return err
		}
		_, err := io.Copy(w, resp.Body)
		return err
	}
	if err := writeHead(w, resp, -1, false); err != nil {
		return err
	}
	cw := httputil.NewChunkedWriter(w)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, err := cw.Write(buf[:n]); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	if err := cw.Close(); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\r\n")
	return err
}

func writeHead(w io.Writer, resp *http.Response, length int64, upgrade bool) error {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %03d %s\r\n", resp.StatusCode, http.StatusText(resp.StatusCode))
	h := resp.Header.Clone()
	for _, name := range hopHeaders {
		h.Del(name)
	}
	h.Del("Content-Length")
	switch {
	case upgrade:
		h.Set("Connection", "Upgrade")
		h.Set("Upgrade", resp.Header.Get("Upgrade"))
	case length >= 0:
		h.Set("Content-Length", strconv.FormatInt(length, 10))
	default:
		h.Set("Transfer-Encoding", "chunked")
	}
	_ = h.Write(&b)
	b.WriteString("\r\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeStatusResponse writes a complete response carrying a Kubernetes
// Status, as the API server words its own errors.
func writeStatusResponse(w io.Writer, code int, msg string) error {
	h, body := kreq.Refusal(code, msg)
	if err := writeHead(w, &http.Response{StatusCode: code, Header: h}, int64(len(body)), false); err != nil {
		return err
	}
	_, err := w.Write(body)
	return err
}

// track puts the response under the worker's session watchdog, so that a
// lock or kill pushed by the proxy, or the grant's expiry, ends it on this
// hop too. A stream (sessions.Classify) is listed as a session; every other
// response is only guarded.
func (h *Handler) track(ctx context.Context, x *exchange) (*sessions.Live, error) {
	if h.Sessions == nil {
		return nil, nil
	}
	g := x.adm.grant
	return h.Sessions.Track(ctx, sessions.Session{
		ID: g.SessionID, Principal: g.Principal, Cluster: h.Cluster.Name,
		Kind: x.st.Kind, Target: x.st.Target, Expires: g.ExpiresAt,
	})
}
