package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/stream"
	"github.com/limenhq/limen/gateway/stream/decode"
)

// eventTimeout bounds the delivery of a session event to the proxy.
const eventTimeout = 30 * time.Second

// offerDecodable rewrites an upgrade request so the API server can only
// agree to a protocol the worker decodes: the base64 WebSocket channel
// protocols are dropped and no WebSocket extension (compression) is offered.
// SPDY's X-Stream-Protocol-Version offers are kept as they are.
func offerDecodable(h http.Header) {
	h.Del("Sec-WebSocket-Extensions")
	var keep []string
	for _, v := range h.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			p = strings.TrimSpace(p)
			if p != "" && !strings.HasPrefix(strings.ToLower(p), "base64.") {
				keep = append(keep, p)
			}
		}
	}
	h.Del("Sec-WebSocket-Protocol")
	if len(keep) > 0 {
		h.Set("Sec-WebSocket-Protocol", strings.Join(keep, ", "))
	}
}

// session is one stream's audited life: its session.start, stored before
// the request goes upstream, its recording (exec, attach), and its one
// session.end. An upgraded stream also keeps its relay's state here.
type session struct {
	x     *exchange
	login string
	body  audit.Session
	tap   *tap
	file  *recording.File // nil but for exec and attach
	start time.Time
	in    atomic.Int64 // client → server bytes
	out   atomic.Int64 // server → client bytes
	// relayed is set once the relay starts: before, nothing was recorded
	// and the recording is discarded.
	relayed bool

	pair *decode.Pair
	up   io.Closer // the API server connection, closed to refuse its bytes

	mu          sync.Mutex
	refused     error  // why Limen ended the stream (decoding or recording)
	clientEnded bool   // the client's bytes ended before the server's
	serverEnd   string // how the server's bytes ended (audit.End…), "" while open
	serverErr   error  // the error that ended them, if not a clean EOF
}

// upgrade relays a 101 response for the session opened before the request
// went upstream: it picks the decoders for the agreed protocol, then writes
// the kube.request event and relays both directions through the decoders.
// A protocol it cannot decode ends the session and answers the request
// instead.
func (x *exchange) upgrade(ctx context.Context, resp *http.Response, conn net.Conn, s *session, ev audit.Event) {
	h := x.h
	body, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		s.finish(ctx, audit.EndError, fmt.Errorf("the API server switched protocols without a connection"))
		x.refuseUpgrade(ev, http.StatusBadGateway, "the API server switched protocols without a connection")
		return
	}
	up := upstream{ReadWriteCloser: body, conn: conn}
	pair, err := decode.ForResponse(resp.Header, s.tap)
	if err != nil {
		h.Logger.Warn("undecodable stream refused", "session", x.adm.grant.SessionID, "err", err)
		_ = up.Close()
		s.finish(ctx, audit.EndDecodeFailed, err)
		x.refuseUpgrade(ev, http.StatusBadGateway, "Limen cannot decode the protocol the API server chose, so it ends the stream: "+err.Error())
		return
	}
	s.relayed = true
	if err := audit.WriteEvent(x.stream, ev); err != nil {
		s.finish(ctx, audit.EndTunnelClosed, fmt.Errorf("write kube.request to the proxy: %w", err))
		return
	}
	if err := writeHead(x.stream, resp, -1, true); err != nil {
		s.finish(ctx, audit.EndTunnelClosed, fmt.Errorf("write the 101 response to the proxy: %w", err))
		return
	}
	reason, err := s.relay(ctx, up, pair)
	s.finish(ctx, reason, err)
}

// refuseUpgrade answers an upgrade the worker will not relay, after its
// audit event, which keeps the API server's status: the user is told code,
// the audit what happened upstream.
func (x *exchange) refuseUpgrade(ev audit.Event, code int, msg string) {
	if err := audit.WriteEvent(x.stream, ev); err != nil {
		return
	}
	_ = writeStatusResponse(x.stream, code, msg)
}

// openSession opens a stream's session before the request goes upstream:
// an upgrade must be one Limen relays (exec, attach, port-forward), exec
// and attach must have their recording open in the spool, and session.start
// must be stored. A refusal means the API server never sees the request,
// so nothing starts unrecorded or unaudited.
func (x *exchange) openSession(ctx context.Context, upgrade bool) (*session, *refusal) {
	h := x.h
	kind := x.st.Kind
	recorded := kind == sessions.KindExec || kind == sessions.KindAttach
	if upgrade && !recorded && kind != sessions.KindPortForward {
		return nil, &refusal{code: http.StatusBadRequest,
			msg: "Limen relays upgraded connections only for pods/exec, pods/attach and pods/portforward"}
	}
	if h.Events == nil {
		return nil, &refusal{code: http.StatusServiceUnavailable,
			msg: "this Limen worker cannot audit sessions (no event channel to the proxy); ask your operator"}
	}
	info, g, q := x.info, x.adm.grant, x.req.URL.Query()
	s := &session{x: x, login: string(kind), start: h.Now(), tap: &tap{ports: map[string]bool{}}}
	s.body = audit.Session{Kind: sessions.AuditKind, Login: s.login, Namespace: info.Namespace, Target: x.st.Target}
	if info.Resource == "pods" {
		s.body.Pod = info.Name
	}
	switch kind {
	case sessions.KindExec, sessions.KindAttach:
		s.body.Container, s.body.Command = q.Get("container"), q["command"]
	case sessions.KindPortForward:
		for _, v := range q["ports"] {
			for _, p := range strings.Split(v, ",") {
				if p = strings.TrimSpace(p); p != "" {
					s.tap.ports[p] = true
				}
			}
		}
		s.body.Ports, _ = s.tap.summary()
	}
	if recorded {
		if h.Spool == nil {
			return nil, &refusal{code: http.StatusServiceUnavailable,
				msg: "this Limen worker has no recording spool, so it refuses exec and attach; ask your operator"}
		}
		f, err := h.Spool.Create(g.SessionID)
		if err != nil {
			h.Logger.Error("open recording; session refused", "session", g.SessionID, "err", err)
			return nil, &refusal{code: http.StatusServiceUnavailable,
				msg: "Limen cannot record the session, so it did not start it; ask your operator to check the worker's recording spool"}
		}
		s.file = f
		s.tap.rec = recording.NewWriter(f, recording.Meta{
			Cluster: h.Cluster.Name, Namespace: info.Namespace, Pod: info.Name, Container: s.body.Container,
			User: g.Principal.Name, Session: g.SessionID, Command: strings.Join(s.body.Command, " "),
			Start: s.start,
		})
	}
	if err := s.emit(ctx, audit.TypeSessionStart, s.body); err != nil {
		h.Logger.Error("session.start not stored; session refused", "session", g.SessionID, "err", err)
		s.discard()
		return nil, &refusal{code: http.StatusServiceUnavailable,
			msg: "Limen's audit trail is unavailable, so the session was not started; try again later"}
	}
	return s, nil
}

// countIn counts the request body's bytes as the client's.
func (s *session) countIn(body io.ReadCloser) io.ReadCloser {
	if body == nil || body == http.NoBody {
		return body
	}
	return &countReader{ReadCloser: body, n: &s.in}
}

type countReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// emit delivers a session event to the proxy's audit store and waits until
// it is stored. Its groups are the groups impersonated.
func (s *session) emit(ctx context.Context, typ audit.Type, body audit.Session) error {
	ev := s.x.event()
	ev.Type, ev.Session = typ, &body
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), eventTimeout)
	defer cancel()
	return s.x.h.Events(ctx, ev)
}

// discard drops the recording of a session that never relayed a byte.
func (s *session) discard() {
	if s.file == nil {
		return
	}
	if err := s.file.Discard(); err != nil {
		s.x.h.Logger.Warn("discard unused recording", "session", s.x.adm.grant.SessionID, "err", err)
	}
}

// maxEndDetail bounds session.end's end_detail.
const maxEndDetail = 512

// finish ends the session: it commits the recording (or discards it, if
// the relay never started) and emits the session's one session.end, which
// says how the stream ended (reason, one of audit.End…) and why (the lock,
// the error behind it). The proxy adds its own reason if it ended the
// session first (proxy.Kube.SessionEvent).
func (s *session) finish(ctx context.Context, reason string, err error) {
	h := s.x.h
	log := h.Logger.With("session", s.x.adm.grant.SessionID, "login", s.login)
	if err != nil || reason != audit.EndCompleted {
		log.Warn("stream ended", "end_reason", reason, "bytes_in", s.in.Load(), "bytes_out", s.out.Load(), "err", err)
	}
	end := s.body
	end.EndReason, end.EndHop = reason, audit.HopWorker
	var ended *sessions.Ended
	if ctx.Err() != nil && errors.As(context.Cause(ctx), &ended) && ended.Detail() != "" {
		end.EndDetail = ended.Detail()
	} else if err != nil {
		end.EndDetail = err.Error()
	}
	if len(end.EndDetail) > maxEndDetail {
		end.EndDetail = end.EndDetail[:maxEndDetail] + "…"
	}
	end.Duration = h.Now().Sub(s.start)
	end.BytesIn, end.BytesOut = s.in.Load(), s.out.Load()
	end.Ports, end.ExitCode = s.tap.summary()
	switch {
	case s.file == nil:
	case !s.relayed:
		s.discard()
	default:
		if err := s.tap.rec.Finish(); err != nil {
			log.Error("finish recording", "err", err)
		}
		item, err := s.file.Commit()
		if err != nil {
			log.Error("commit recording; it is incomplete", "err", err)
		} else {
			end.RecordingSHA256 = item.SHA256
			if h.Recorded != nil {
				h.Recorded(item)
			}
		}
	}
	if err := s.emit(ctx, audit.TypeSessionEnd, end); err != nil {
		log.Error("session.end not stored", "err", err)
	}
}

// tap is the stream.Handler both decoders report to: it forwards to the
// recording (exec, attach) and keeps what session.end reports.
type tap struct {
	rec *recording.Writer

	mu    sync.Mutex
	ports map[string]bool
	exit  *int
}

func (t *tap) next() stream.Handler {
	if t.rec == nil {
		return stream.NopHandler{}
	}
	return recorder{t.rec}
}

// recorder marks the recording's errors, so that session.end can tell a
// recording failure from a stream that could not be decoded.
type recorder struct{ h stream.Handler }

func (r recorder) Stdin(n int) error                     { return recordErr(r.h.Stdin(n)) }
func (r recorder) Stdout(p []byte) error                 { return recordErr(r.h.Stdout(p)) }
func (r recorder) Stderr(p []byte) error                 { return recordErr(r.h.Stderr(p)) }
func (r recorder) Resize(ts stream.TermSize) error       { return recordErr(r.h.Resize(ts)) }
func (r recorder) Exit(st stream.ExitStatus) error       { return recordErr(r.h.Exit(st)) }
func (r recorder) Close(dir stream.Direction) error      { return recordErr(r.h.Close(dir)) }
func (r recorder) PortError(port uint16, m string) error { return recordErr(r.h.PortError(port, m)) }
func (r recorder) CloseChannel(dir stream.Direction, ch int) error {
	return recordErr(r.h.CloseChannel(dir, ch))
}
func (r recorder) PortData(port uint16, dir stream.Direction, n int) error {
	return recordErr(r.h.PortData(port, dir, n))
}

// recordError is a failure to write the recording.
type recordError struct{ err error }

func (e *recordError) Error() string { return "recording: " + e.err.Error() }
func (e *recordError) Unwrap() error { return e.err }

func recordErr(err error) error {
	if err == nil {
		return nil
	}
	return &recordError{err}
}

func (t *tap) summary() ([]string, *int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ports []string
	for p := range t.ports {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	return ports, t.exit
}

func (t *tap) port(p uint16) {
	t.mu.Lock()
	t.ports[strconv.Itoa(int(p))] = true
	t.mu.Unlock()
}

// Stdin is counted by the relay and never recorded.
func (t *tap) Stdin(n int) error { return t.next().Stdin(n) }

// Stdout records output.
func (t *tap) Stdout(p []byte) error { return t.next().Stdout(p) }

// Stderr records error output.
func (t *tap) Stderr(p []byte) error { return t.next().Stderr(p) }

// Resize records a terminal size.
func (t *tap) Resize(ts stream.TermSize) error { return t.next().Resize(ts) }

// Exit keeps and records the exit status.
func (t *tap) Exit(st stream.ExitStatus) error {
	t.mu.Lock()
	code := st.Code
	t.exit = &code
	t.mu.Unlock()
	return t.next().Exit(st)
}

// exited reports whether the exit status was seen.
func (t *tap) exited() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.exit != nil
}

// CloseChannel passes the v5 close signal on.
func (t *tap) CloseChannel(dir stream.Direction, ch int) error {
	return t.next().CloseChannel(dir, ch)
}

// PortData notes a forwarded port.
func (t *tap) PortData(port uint16, dir stream.Direction, n int) error {
	t.port(port)
	return t.next().PortData(port, dir, n)
}

// PortError notes a forwarded port.
func (t *tap) PortError(port uint16, msg string) error {
	t.port(port)
	return t.next().PortError(port, msg)
}

// Close passes the peer's close on.
func (t *tap) Close(dir stream.Direction) error { return t.next().Close(dir) }

var _ stream.Handler = (*tap)(nil)

func (h *Handler) upgradeTransport() http.RoundTripper {
	if h.Upgrades != nil {
		return h.Upgrades
	}
	return h.Transport
}

// UpgradeTransport returns the transport for upgrade requests to the API
// server: HTTP/1.1 only (Go's HTTP/2 transport refuses SPDY upgrades), TLS
// 1.2 or later, verified with the CA in caFile.
func UpgradeTransport(caFile string) (http.RoundTripper, error) {
	cfg, err := rest.TLSConfigFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}})
	if err != nil {
		return nil, fmt.Errorf("kube-ca-file %s: %w", caFile, err)
	}
	if cfg == nil {
		return nil, fmt.Errorf("kube-ca-file: required for TLS to the API server")
	}
	cfg.NextProtos = []string{"http/1.1"}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{TLSClientConfig: cfg, DialContext: d.DialContext, TLSHandshakeTimeout: 10 * time.Second,
		ResponseHeaderTimeout: time.Minute}, nil
}
