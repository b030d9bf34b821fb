package worker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/limenhq/limen/gateway/access"
	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/grant"
	"github.com/limenhq/limen/gateway/impersonate"
	"github.com/limenhq/limen/gateway/relay"
	"github.com/limenhq/limen/gateway/reqinfo"
	"github.com/limenhq/limen/gateway/scope"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/tunnel"
)

// exchange is one request on one stream, as the steps of ServeStream fill
// it in.
type exchange struct {
	h      *Handler
	stream net.Conn
	br     *bufio.Reader
	req    *http.Request
	start  time.Time

	adm  admission       // admit
	info *reqinfo.Info   // classify; nil before
	st   sessions.Stream // classify: what the request opens
	// upgrading is set by classify for a request that asks for a protocol
	// upgrade (exec, attach, port-forward); conn learns the API server
	// connection it goes out on.
	upgrading bool
	conn      gotConn
	observed  bool // observe ran: the status is on the span and in the metrics
	// keepStream stops track's closing of the stream when the session
	// ends: an upgraded stream's relay closes it itself, once it has told
	// the client why (session.tellEnd). It reports whether the stream was
	// still open.
	keepStream func() bool
}

// event is the audit event every later one starts from: who, as which
// groups (the groups impersonated, nil before the re-check), where.
func (x *exchange) event() audit.Event {
	g := x.adm.grant
	return audit.Event{
		Time: x.h.Now(), Principal: g.Principal, Groups: x.adm.groups, KubeUser: x.kubeUser(), Cluster: x.h.Cluster.Name,
		SessionID: x.adm.req.SessionID, ClientAddr: x.adm.req.ClientAddr,
	}
}

// identity is how the admitted principal is presented to the API server:
// the worker's prefix, then the client's own (per-client identity).
func (x *exchange) identity() impersonate.Config {
	im := x.h.Impersonation
	if x.adm.scope != nil && x.adm.scope.UserPrefix != "" {
		// Per-client identity: the policy gives this client's users a
		// name of their own (console:alice), after the worker's prefix.
		im.UserPrefix += x.adm.scope.UserPrefix
	}
	return im
}

// kubeUser is the Kubernetes user name the request goes out as, for its
// events; empty before the grant is verified (nothing is impersonated).
func (x *exchange) kubeUser() string {
	if x.adm.groups == nil {
		return ""
	}
	u, err := x.identity().User(x.adm.grant.Principal)
	if err != nil {
		return ""
	}
	return u
}

// kubeEvent is the request's kube.request event with the given status: the
// classification once it is made, the raw path before.
func (x *exchange) kubeEvent(status int) audit.Event {
	ev := x.event()
	ev.Type = audit.TypeKubeRequest
	k := &audit.KubeRequest{Method: x.req.Method, Path: audit.RequestPath(x.req.RequestURI), Status: status,
		Latency: x.h.Now().Sub(x.start), UserAgent: clipUserAgent(x.req.UserAgent())}
	if i := x.info; i != nil {
		k.Verb, k.APIGroup, k.APIVersion, k.Resource = i.Verb, i.APIGroup, i.APIVersion, i.Resource
		k.Subresource, k.Namespace, k.Name, k.Path = i.Subresource, i.Namespace, i.Name, x.adm.path.String()
	}
	ev.Kube = k
	return ev
}

// refuse answers the request itself, after its audit event: auth.denied
// for a denial, kube.request otherwise.
func (x *exchange) refuse(rf *refusal) {
	x.observe(x.req.Context(), rf.code)
	ev := x.kubeEvent(rf.code)
	if rf.reason != "" {
		ev = x.event()
		ev.Type = audit.TypeAuthDenied
		ev.Denied = &audit.Denied{Hop: audit.HopWorker, Action: audit.ActionKube, Reason: rf.reason, Path: audit.RequestPath(x.req.RequestURI)}
	}
	// The event and the answer leave in one write.
	fw := &frameWriter{w: x.stream}
	if err := audit.WriteEvent(fw, ev); err != nil {
		x.h.Logger.WarnContext(x.req.Context(), "write audit event", "session", x.adm.req.SessionID, "err", err)
		return
	}
	if err := writeStatusResponse(fw, rf.code, rf.statusReason(), rf.msg); err == nil {
		_ = fw.Flush()
	}
}

// classify decides what the request is, as the API server will (verb,
// resource, …), and what it opens (sessions.Classify).
func (x *exchange) classify() *refusal {
	info, err := reqinfo.Classify(x.req, x.adm.path)
	if err != nil {
		return &refusal{code: http.StatusBadRequest, msg: "cannot classify the request: " + err.Error()}
	}
	x.info = &info
	x.st = sessions.Classify(x.req, info)
	x.upgrading = x.req.Header.Get("Upgrade") != ""
	return nil
}

// checkScope matches the classified request against the client's scope in
// the worker's own policy: the proxy did the same from its snapshot, and a
// bundle either hop activated since may have narrowed it.
func (x *exchange) checkScope() *refusal {
	if x.adm.grant.Purpose == grant.PurposeAccessReview {
		// The proxy asking what the client's identity may do: this grant
		// carries that one question and nothing else, scoped or not.
		if access.IsRulesReview(x.info) && x.req.Method == http.MethodPost {
			return nil
		}
		return &refusal{http.StatusForbidden, "an access-review grant carries only a SelfSubjectRulesReview",
			"grant: an access-review grant used for another request"}
	}
	if x.h.Scopes == nil {
		return nil
	}
	path := x.adm.path.String()
	if x.adm.scope.Allows(x.info, path) {
		return nil
	}
	msg := scope.Refusal(x.adm.grant.Principal.ClientID, x.info, path)
	return &refusal{code: http.StatusForbidden, msg: msg, reason: scope.DeniedReason + ": " + msg}
}

// track puts the response under the worker's session watchdog, so that a
// lock or kill pushed by the proxy, or the grant's expiry, ends it on this
// hop too: the returned context ends then, and the tunnel stream is closed.
// A stream (sessions.Classify) is listed as a session; every other response
// is only guarded. untrack releases it once the response is done.
func (x *exchange) track(ctx context.Context) (_ context.Context, untrack func(), _ *refusal) {
	h, g := x.h, x.adm.grant
	if h.Sessions == nil {
		return ctx, func() {}, nil
	}
	live, err := h.Sessions.Track(ctx, sessions.Session{
		ID: x.adm.req.SessionID, Principal: g.Principal, Cluster: h.Cluster.Name,
		Kind: x.st.Kind, Target: x.st.Target, Expires: g.ExpiresAt,
	})
	if errors.Is(err, sessions.ErrClosed) {
		return ctx, nil, &refusal{code: http.StatusServiceUnavailable,
			msg: "this Limen worker is shutting down and starts no new stream; run the command again: another worker of the cluster takes it"}
	}
	if err != nil {
		return ctx, nil, &refusal{http.StatusForbidden, err.Error(), "session refused: " + err.Error()}
	}
	// Idle or not, whatever its kind, the response ends at once: the
	// upstream request is cancelled and the tunnel stream closed.
	stop := context.AfterFunc(live.Context(), func() { x.stream.Close() })
	x.keepStream = stop
	return live.Context(), func() {
		stop() // first: a response that completes keeps its stream
		live.End(sessions.ReasonCompleted)
	}, nil
}

// impersonate builds the request to the API server as the admitted
// identity: client identity and forwarding headers are gone (admit),
// Impersonate-User (the principal's Kubernetes user name, see
// impersonate.Config.User), one Impersonate-Group per admitted group and the
// session as an extra are set, X-Forwarded-For names the client the proxy saw, and
// the worker's own ServiceAccount token authenticates it.
func (x *exchange) impersonate(ctx context.Context) (*http.Request, *refusal) {
	h, g := x.h, x.adm.grant
	token, err := h.Token()
	if err != nil {
		h.Logger.ErrorContext(ctx, "service account token unavailable", "err", err)
		return nil, &refusal{code: http.StatusServiceUnavailable, msg: "the Limen worker cannot read its ServiceAccount token; ask your operator"}
	}
	out := x.outbound(ctx)
	if err := x.identity().Set(out.Header, g.Principal, x.adm.groups, x.adm.req.SessionID); err != nil {
		return nil, &refusal{http.StatusForbidden, "Limen refuses to impersonate: " + err.Error(), "impersonation: " + err.Error()}
	}
	impersonate.SetForwardedFor(out.Header, x.adm.req.ClientAddr)
	out.Header.Set("Authorization", "Bearer "+token)
	if x.upgrading {
		offerDecodable(out.Header)
		out = x.conn.trace(out)
	}
	return out, nil
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
	for _, name := range relay.HopHeaders {
		out.Header.Del(name)
	}
	if upgrade != "" {
		out.Header.Set("Connection", "Upgrade")
		out.Header.Set("Upgrade", upgrade)
	}
	return out
}

// roundTrip sends out to the API server and returns its response, or nil
// once it has answered the request itself (the API server could not be
// reached, or switched protocols unasked) or the proxy is gone. The
// session s (nil for a request that opens none) ends here when the stream
// never started: the request failed, or the API server refused the upgrade
// (no such pod, RBAC), whose answer is then relayed as it is.
func (x *exchange) roundTrip(ctx context.Context, out *http.Request, s *session) *http.Response {
	h := x.h
	rt := h.Transport
	if x.upgrading {
		rt = h.upgradeTransport()
	}
	if s != nil {
		out.Body = s.countIn(out.Body)
	}
	uctx, span := h.startSpan(ctx, "limen.worker.upstream", trace.SpanKindClient)
	injectTrace(uctx, out)
	resp, err := rt.RoundTrip(out)
	if resp != nil {
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
		x.observe(ctx, resp.StatusCode)
	}
	span.End()
	if err != nil {
		s.finish(ctx, outsideEnd(ctx, audit.EndUpstreamReset), fmt.Errorf("request to the API server: %w", err))
		if ctx.Err() != nil {
			return nil // the proxy closed the stream
		}
		h.Logger.WarnContext(ctx, "forward to API server", "session", x.adm.req.SessionID, "err", err)
		x.refuse(&refusal{code: http.StatusBadGateway, msg: "the Limen worker could not reach the API server"})
		return nil
	}
	if resp.StatusCode == http.StatusUnauthorized {
		// The API server authenticates the worker, never the user (who is
		// impersonated): its token is expired, revoked or not this
		// cluster's. An operator problem, told as one; the file is read
		// again for the next request, in case it was rotated.
		resp.Body.Close()
		if h.TokenRefused != nil {
			h.TokenRefused(strings.TrimPrefix(out.Header.Get("Authorization"), "Bearer "))
		}
		const msg = "the API server refused the Limen worker's ServiceAccount token (401: expired, revoked or not this cluster's); " +
			"Limen reads it again for the next request: try again, and if this persists ask your operator to check the worker's token"
		h.Logger.ErrorContext(ctx, "the API server refused the ServiceAccount token", "session", x.adm.req.SessionID)
		s.finish(ctx, audit.EndNotStarted, errors.New(msg))
		x.refuse(&refusal{code: http.StatusServiceUnavailable, msg: msg})
		return nil
	}
	switched := resp.StatusCode == http.StatusSwitchingProtocols
	switch {
	case switched && !x.upgrading:
		resp.Body.Close()
		const msg = "the API server switched protocols for a request that asked for no upgrade"
		s.finish(ctx, audit.EndError, errors.New(msg))
		x.refuseUpgrade(x.kubeEvent(resp.StatusCode), http.StatusBadGateway, msg)
		return nil
	case x.upgrading && !switched:
		s.finish(ctx, audit.EndNotStarted, fmt.Errorf("the API server answered %s", resp.Status))
		x.upgrading = false // a plain response, relayed as it is
	}
	return resp
}

// respond relays a response that is not an upgrade, after its audit event
// ev, chunk by chunk as it arrives, and ends the session s, if any, with
// how the response ended.
func (x *exchange) respond(ctx context.Context, cancel context.CancelCauseFunc, resp *http.Response, s *session, ev audit.Event) {
	// The event goes ahead of the response, in the same write as its head
	// (and, for a short response, its body): the proxy stores it before it
	// relays a byte.
	w := &errWriter{w: x.stream}
	fw := &frameWriter{w: w}
	if err := audit.WriteEvent(fw, ev); err != nil {
		s.finish(ctx, audit.EndTunnelClosed, fmt.Errorf("write kube.request to the proxy: %w", err))
		return
	}
	// The request body is consumed: a read now returns only when the proxy
	// closes the stream, which ends an idle watch at once; its error is the
	// cause (the tunnel dying under the stream says the proxy was lost). With nothing
	// buffered it reads the stream itself, so that the request's 4 KiB
	// read buffer is not held for the life of a watch.
	var rest io.Reader = x.br
	if x.br.Buffered() == 0 {
		rest, x.br = x.stream, nil
	}
	watchPeer := func() {
		var b [1]byte
		for {
			n, err := rest.Read(b[:])
			if n > 0 || err != nil {
				cancel(err)
				break
			}
		}
	}
	// A tunnel stream starts that read only once it has something to
	// tell (tunnel.Waker): no goroutine waits for the whole life of a
	// response, of an idle watch above all, and none at all for a response
	// that completes first.
	stopWatch := func() bool { return false }
	if w, ok := rest.(tunnel.Waker); ok {
		stopWatch = w.OnWake(watchPeer)
	} else {
		go watchPeer()
	}
	if s != nil {
		resp.Body = s.countOut(resp.Body)
	}
	err := writeResponse(fw, x.req.Method, resp, x.st.Kind != sessions.KindNone)
	stopWatch()
	if err != nil && !w.wrote {
		s.finish(ctx, audit.EndTunnelClosed, fmt.Errorf("write kube.request to the proxy: %w", err))
		return
	}
	if err != nil && ctx.Err() == nil {
		x.h.Logger.Debug("relay response", "err", err)
	}
	if cause := context.Cause(ctx); ctx.Err() != nil && errors.Is(cause, tunnel.ErrTunnelClosed) {
		err = cause // what ended it, not the cancellation it caused
	}
	s.finish(ctx, responseEnd(ctx, w, err), err)
}

// responseEnd says how a relayed response ended (audit.End…), from the
// error that ended it.
func responseEnd(ctx context.Context, w *errWriter, err error) string {
	switch {
	case err == nil:
		return audit.EndCompleted
	case ctx.Err() != nil:
		return outsideEnd(ctx, audit.EndClientClosed)
	case w.err != nil:
		return clientEnd(w.err)
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
		return audit.EndProxyLost
	}
	return audit.EndClientClosed
}

// clientEnd is how a stream ended whose write to the proxy failed with
// err: the proxy lost (its tunnel died under the stream: it crashed, or
// the network failed) or, on a live tunnel, the client gone.
func clientEnd(err error) string {
	if errors.Is(err, tunnel.ErrTunnelClosed) {
		return audit.EndProxyLost
	}
	return audit.EndClientClosed
}

// clipUserAgent cuts a User-Agent to audit.MaxUserAgent bytes, on a rune
// boundary.
func clipUserAgent(ua string) string {
	if len(ua) <= audit.MaxUserAgent {
		return ua
	}
	cut := audit.MaxUserAgent
	for cut > 0 && !utf8.RuneStart(ua[cut]) {
		cut--
	}
	return ua[:cut]
}

// proxyLost names the end of a session whose stream's context ended with
// cause (sessions.Config.ClientGone): the tunnel closing under it means the
// proxy was lost, which the session.end says (audit.EndProxyLost).
func proxyLost(cause error) (sessions.Reason, bool) {
	if errors.Is(cause, tunnel.ErrTunnelClosed) {
		return sessions.ReasonProxyLost, true
	}
	return "", false
}
