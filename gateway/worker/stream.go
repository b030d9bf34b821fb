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
	"github.com/limenhq/limen/gateway/kreq"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/stream"
	"github.com/limenhq/limen/gateway/stream/decode"
)

// relayBuffer is the size of each direction's copy buffer.
const relayBuffer = 64 << 10

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

// session is one upgraded stream being relayed.
type session struct {
	x     *exchange
	login string
	body  audit.Session
	tap   *tap
	file  *recording.File // nil for port-forward
	start time.Time
	in    atomic.Int64 // client → server bytes
	out   atomic.Int64 // server → client bytes
}

// upgrade relays a 101 response: it picks the decoders for the agreed
// protocol, opens the recording, emits session.start, then writes the
// kube.request event and relays both directions through the decoders. Any
// step that fails before the relay answers the request instead.
func (x *exchange) upgrade(ctx context.Context, resp *http.Response, info kreq.Info, ev audit.Event) {
	h := x.h
	up, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		x.refuseUpgrade(ev, http.StatusBadGateway, "the API server switched protocols without a connection")
		return
	}
	s, code, msg := x.openSession(info)
	if s == nil {
		x.refuseUpgrade(ev, code, msg)
		return
	}
	pair, err := decode.ForResponse(resp.Header, s.tap)
	if err != nil {
		h.Logger.Warn("undecodable stream refused", "session", x.grant.SessionID, "err", err)
		s.abandon()
		x.refuseUpgrade(ev, http.StatusBadGateway, "Limen cannot decode the protocol the API server chose, so it ends the stream: "+err.Error())
		return
	}
	if err := s.emit(ctx, audit.TypeSessionStart, s.body); err != nil {
		h.Logger.Error("session.start not stored; stream refused", "session", x.grant.SessionID, "err", err)
		s.abandon()
		x.refuseUpgrade(ev, http.StatusServiceUnavailable, "Limen's audit trail is unavailable, so the session was not opened; try again later")
		return
	}
	if err := audit.WriteEvent(x.stream, ev); err != nil {
		s.finish(ctx, errors.New("proxy stream closed"))
		return
	}
	if err := writeHead(x.stream, resp, -1, true); err != nil {
		s.finish(ctx, err)
		return
	}
	err = s.relay(ctx, up, pair)
	s.finish(ctx, err)
}

// refuseUpgrade answers an upgrade the worker will not relay, after its
// audit event (which then carries the status the user sees).
func (x *exchange) refuseUpgrade(ev audit.Event, code int, msg string) {
	ev.Kube.Status = code
	if err := audit.WriteEvent(x.stream, ev); err != nil {
		return
	}
	_ = writeStatusResponse(x.stream, code, msg)
}

// openSession prepares the session's audit body and, for exec and attach,
// its recording. On failure it returns the status and message to answer.
func (x *exchange) openSession(info kreq.Info) (*session, int, string) {
	h := x.h
	if x.kind != sessions.KindExec && x.kind != sessions.KindAttach && x.kind != sessions.KindPortForward {
		return nil, http.StatusBadRequest, "Limen relays upgraded connections only for pods/exec, pods/attach and pods/portforward"
	}
	login := string(x.kind)
	if h.Events == nil {
		return nil, http.StatusServiceUnavailable, "this Limen worker cannot audit sessions (no event channel to the proxy); ask your operator"
	}
	q := x.req.URL.Query()
	s := &session{x: x, login: login, start: h.Now(), tap: &tap{ports: map[string]bool{}}}
	s.body = audit.Session{Kind: sessions.AuditKind, Login: login, Namespace: info.Namespace, Pod: info.Name,
		Container: q.Get("container")}
	if x.kind == sessions.KindPortForward {
		for _, v := range q["ports"] {
			for _, p := range strings.Split(v, ",") {
				if p = strings.TrimSpace(p); p != "" {
					s.tap.ports[p] = true
				}
			}
		}
		return s, 0, ""
	}
	s.body.Command = q["command"]
	if h.Spool == nil {
		return nil, http.StatusServiceUnavailable, "this Limen worker has no recording spool, so it refuses exec and attach; ask your operator"
	}
	f, err := h.Spool.Create(x.grant.SessionID)
	if err != nil {
		h.Logger.Error("open recording", "session", x.grant.SessionID, "err", err)
		return nil, http.StatusServiceUnavailable, "Limen cannot record the session, so it refuses it; ask your operator to check the worker's recording spool"
	}
	s.file = f
	s.tap.rec = recording.NewWriter(f, recording.Meta{
		Cluster: h.Cluster.Name, Namespace: info.Namespace, Pod: info.Name, Container: s.body.Container,
		User: x.grant.Principal.Name, Session: x.grant.SessionID, Command: strings.Join(s.body.Command, " "),
		Start: s.start,
	})
	return s, 0, ""
}

// emit delivers a session event to the proxy's audit store and waits until
// it is stored.
func (s *session) emit(ctx context.Context, typ audit.Type, body audit.Session) error {
	x := s.x
	ev := x.event()
	ev.Type, ev.Groups, ev.Session = typ, x.grant.Groups, &body
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), eventTimeout)
	defer cancel()
	return x.h.Events(ctx, ev)
}

// relay copies both directions through the decoders until either ends, an
// event is refused (decoding or recording failed) or ctx ends (lock, kill,
// tunnel gone). Both connections are closed when it returns.
func (s *session) relay(ctx context.Context, up io.ReadWriteCloser, pair *decode.Pair) error {
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			_ = up.Close()
			_ = s.x.stream.Close()
		})
	}
	stop := context.AfterFunc(ctx, closeBoth)
	defer stop()
	errc := make(chan error, 2)
	go func() {
		err := teeCopy(up, s.x.br, pair.Client, &s.in)
		errc <- errors.Join(err, pair.Client.Close())
	}()
	go func() {
		err := teeCopy(s.x.stream, up, pair.Server, &s.out)
		errc <- errors.Join(err, pair.Server.Close())
	}()
	first := <-errc
	closeBoth()
	second := <-errc
	if ctx.Err() != nil {
		return nil // ended from outside; the closing errors say nothing
	}
	// After the first direction ends, the other fails on its closed
	// connection: only a decoding or recording error is worth reporting.
	var de *decodeError
	if errors.As(second, &de) && !errors.As(first, &de) {
		return second
	}
	return first
}

// decodeError marks a failure to decode or record, which ends the stream.
type decodeError struct{ err error }

func (e *decodeError) Error() string { return "decode or record stream: " + e.err.Error() }
func (e *decodeError) Unwrap() error { return e.err }

// teeCopy copies src to dst, feeding every chunk to dec first: a chunk the
// decoder (or the recording behind it) refuses is never relayed.
func teeCopy(dst io.Writer, src io.Reader, dec decode.Decoder, n *atomic.Int64) error {
	buf := make([]byte, relayBuffer)
	for {
		nr, rerr := src.Read(buf)
		if nr > 0 {
			if _, err := dec.Write(buf[:nr]); err != nil {
				return &decodeError{err}
			}
			if _, err := dst.Write(buf[:nr]); err != nil {
				return err
			}
			n.Add(int64(nr))
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// abandon drops a session that never started: its recording is committed
// empty, so the spool keeps no half-written file.
func (s *session) abandon() {
	if s.file == nil {
		return
	}
	if err := s.tap.rec.Finish(); err != nil {
		s.x.h.Logger.Warn("finish unused recording", "err", err)
	}
	if _, err := s.file.Commit(); err != nil {
		s.x.h.Logger.Warn("commit unused recording", "err", err)
	}
}

// finish commits the recording and emits session.end.
func (s *session) finish(ctx context.Context, relayErr error) {
	h := s.x.h
	log := h.Logger.With("session", s.x.grant.SessionID, "login", s.login)
	if relayErr != nil {
		log.Warn("stream ended", "err", relayErr)
	}
	end := s.body
	end.Duration = h.Now().Sub(s.start)
	end.BytesIn, end.BytesOut = s.in.Load(), s.out.Load()
	end.Ports, end.ExitCode = s.tap.summary()
	if s.file != nil {
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
	return t.rec
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
