package worker

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/grant"
	"github.com/limenhq/limen/gateway/kpath"
	"github.com/limenhq/limen/gateway/kreq"
	"github.com/limenhq/limen/gateway/sessions"
)

// exchange is one request on one stream.
type exchange struct {
	h      *Handler
	stream net.Conn
	br     *bufio.Reader
	req    *http.Request
	start  time.Time
	grant  grant.Grant
	path   kpath.Path
	kind   sessions.Kind // what the request opens (sessions.Classify)
}

func (x *exchange) event() audit.Event {
	return audit.Event{
		Time: x.h.Now(), Principal: x.grant.Principal, Cluster: x.h.Cluster.Name,
		SessionID: x.grant.SessionID, ClientAddr: x.grant.ClientAddr,
	}
}

// refuse answers the request itself, after its audit event.
func (x *exchange) refuse(rf *refusal) {
	ev := x.event()
	rawPath := audit.RequestPath(x.req.RequestURI)
	if rf.reason != "" {
		ev.Type = audit.TypeAuthDenied
		ev.Denied = &audit.Denied{Hop: audit.HopWorker, Reason: rf.reason, Path: rawPath}
	} else {
		ev.Type = audit.TypeKubeRequest
		ev.Groups = x.grant.Groups
		ev.Kube = &audit.KubeRequest{Method: x.req.Method, Path: rawPath, Status: rf.code, Latency: x.h.Now().Sub(x.start)}
	}
	if err := audit.WriteEvent(x.stream, ev); err != nil {
		x.h.Logger.Warn("write audit event", "err", err)
		return
	}
	_ = writeStatusResponse(x.stream, rf.code, rf.msg)
}

// forward sends the request to the API server as the granted identity and
// relays the response after its audit event.
func (x *exchange) forward(ctx context.Context, cancel context.CancelFunc, groups []string) {
	h := x.h
	info, err := kreq.Classify(x.req, x.path)
	if err != nil {
		x.refuse(&refusal{code: http.StatusBadRequest, msg: "cannot classify the request: " + err.Error()})
		return
	}
	st := sessions.Classify(x.req, info)
	x.kind = st.Kind
	live, err := h.track(ctx, x, st)
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
	out := x.outbound(ctx)
	if err := kreq.Impersonate(out.Header, x.grant.Principal.Name, groups, x.grant.SessionID); err != nil {
		x.refuse(&refusal{http.StatusForbidden, "Limen refuses to impersonate: " + err.Error(), "impersonation: " + err.Error()})
		return
	}
	out.Header.Set("Authorization", "Bearer "+token)
	rt := h.Transport
	if out.Header.Get("Upgrade") != "" {
		offerDecodable(out.Header) // stream.go
		rt = h.upgradeTransport()
	}
	resp, err := rt.RoundTrip(out)
	if err != nil {
		if ctx.Err() != nil {
			return // the proxy closed the stream
		}
		h.Logger.Warn("forward to API server", "err", err)
		x.refuse(&refusal{code: http.StatusBadGateway, msg: "the Limen worker could not reach the API server"})
		return
	}
	defer resp.Body.Close()
	ev := x.event()
	ev.Type, ev.Groups = audit.TypeKubeRequest, groups
	ev.Kube = &audit.KubeRequest{
		Verb: info.Verb, APIGroup: info.APIGroup, APIVersion: info.APIVersion, Resource: info.Resource,
		Subresource: info.Subresource, Namespace: info.Namespace, Name: info.Name,
		Method: x.req.Method, Path: x.path.String(), Status: resp.StatusCode, Latency: h.Now().Sub(x.start),
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		x.upgrade(ctx, resp, info, ev) // stream.go: decode, record, audit the session
		return
	}
	// The event goes ahead of the response: the proxy stores it before it
	// relays a byte.
	if err := audit.WriteEvent(x.stream, ev); err != nil {
		return
	}
	// The request body is consumed: a read now returns only when the proxy
	// closes the stream, which ends an idle watch at once.
	go func() {
		_, _ = x.br.ReadByte()
		cancel()
	}()
	if err := writeResponse(x.stream, x.req.Method, resp); err != nil && ctx.Err() == nil {
		h.Logger.Debug("relay response", "err", err)
	}
}

// outbound builds the request to the API server: the same method, canonical
// path, query and headers (already stripped of client identity), minus
// hop-by-hop headers.
func (x *exchange) outbound(ctx context.Context) *http.Request {
	out := x.req.Clone(ctx)
	out.RequestURI = ""
	u := *x.h.Upstream
	x.path.SetURL(&u)
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
func (h *Handler) track(ctx context.Context, x *exchange, st sessions.Stream) (*sessions.Live, error) {
	if h.Sessions == nil {
		return nil, nil
	}
	return h.Sessions.Track(ctx, sessions.Session{
		ID: x.grant.SessionID, Principal: x.grant.Principal, Cluster: h.Cluster.Name,
		Kind: st.Kind, Target: st.Target, Expires: x.grant.ExpiresAt,
	})
}
