package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/stream/decode"
)

// eventTimeout bounds the delivery of a session event to the proxy.
const eventTimeout = 30 * time.Second

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
	ending  atomic.Bool // finish ran

	pair *decode.Pair
	up   io.Closer // the API server connection, closed to refuse its bytes
	// ended is the relay's context: done once a lock, kill, expiry or the
	// tunnel ended the stream from outside.
	ended context.Context

	// wmu serializes the writes to the client: the relay's whole frames,
	// and the one failure status that ends the stream early (fail,
	// tellEnd). After that status (told) nothing more is written.
	wmu        sync.Mutex
	atBoundary bool // the client's bytes end between frames
	told       bool

	mu      sync.Mutex
	refused error // why Limen ended the stream (decoding or recording)
	// refusedLate: the refusal came after the stream was ended from
	// outside, when tearing it down can leave either direction mid-way.
	refusedLate bool
	clientEnded bool   // the client's bytes ended before the server's
	clientErr   error  // the error that ended them, if not a clean EOF
	serverEnd   string // how the server's bytes ended (audit.End…), "" while open
	serverErr   error  // the error that ended them, if not a clean EOF
}

// openSession opens a stream's session before the request goes upstream;
// a request that opens no stream has none (nil, nil). An upgrade must be
// one Limen relays (exec, attach, port-forward), exec and attach must have
// their recording open in the spool, and session.start must be stored. A
// refusal means the API server never sees the request, so nothing starts
// unrecorded or unaudited.
func (x *exchange) openSession(ctx context.Context) (*session, *refusal) {
	h := x.h
	kind := x.st.Kind
	if kind == sessions.KindNone && !x.upgrading {
		return nil, nil
	}
	recorded := kind == sessions.KindExec || kind == sessions.KindAttach
	if x.upgrading && !recorded && kind != sessions.KindPortForward {
		return nil, &refusal{code: http.StatusBadRequest,
			msg: "Limen relays upgraded connections only for pods/exec, pods/attach and pods/portforward"}
	}
	if rf := undecodableOffer(x.req.Header); x.upgrading && rf != nil {
		return nil, rf
	}
	if h.Events == nil {
		return nil, &refusal{code: http.StatusServiceUnavailable,
			msg: "this Limen worker cannot audit sessions (no event channel to the proxy); ask your operator"}
	}
	info, g, sid, q := x.info, x.adm.grant, x.adm.req.SessionID, x.req.URL.Query()
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
		f, err := h.Spool.Create(sid)
		var full *recording.SpoolFullError
		if errors.As(err, &full) {
			h.Logger.Warn("recording spool full; session refused", "session", sid, "err", err)
			return nil, &refusal{code: http.StatusServiceUnavailable, msg: spoolFullMessage(full, "did not start the session")}
		}
		if err != nil {
			h.Logger.Error("open recording; session refused", "session", sid, "err", err)
			return nil, &refusal{code: http.StatusServiceUnavailable,
				msg: "Limen cannot record the session, so it did not start it; ask your operator to check the worker's recording spool"}
		}
		s.file = f
		s.tap.rec = recording.NewCappedWriter(f, recording.Meta{
			Cluster: h.Cluster.Name, Namespace: info.Namespace, Pod: info.Name, Container: s.body.Container,
			User: g.Principal.QualifiedName(), Session: sid, Command: strings.Join(s.body.Command, " "),
			Start: s.start, TTY: ttyOption(q),
		}, cmp.Or(h.RecordingMaxBytes, recording.DefaultMaxBytes))
	}
	if err := s.emit(ctx, audit.TypeSessionStart, s.body); err != nil {
		h.Logger.Error("session.start not stored; session refused", "session", sid, "err", err)
		s.discard()
		return nil, &refusal{code: http.StatusServiceUnavailable,
			msg: "Limen's audit trail is unavailable, so the session was not started; try again later"}
	}
	return s, nil
}

// ttyOption reads the tty option of an exec or attach as the API server's
// parameter conversion does (the first value; absent, "0" or "false" in any
// case is false, anything else true), so that the recording knows whether
// the output came through a terminal.
func ttyOption(q url.Values) bool {
	v, tty := q["tty"], false
	_ = runtime.Convert_Slice_string_To_bool(&v, &tty, nil) // never fails
	return tty
}

// spoolFullMessage tells the user that the worker's spool has no room, so
// Limen did what, and what the operator can do.
func spoolFullMessage(full *recording.SpoolFullError, did string) string {
	return fmt.Sprintf("the Limen worker's recording spool is full (its limit, recording-spool-max-bytes, is %s), so Limen %s: "+
		"exec and attach need room to be recorded. Ask your operator to check that recordings reach the proxy, or to raise recording-spool-max-bytes",
		recording.FormatBytes(full.Max), did)
}

// countIn counts the request body's bytes as the client's.
func (s *session) countIn(body io.ReadCloser) io.ReadCloser {
	if body == nil || body == http.NoBody {
		return body
	}
	return &countReader{ReadCloser: body, n: &s.in}
}

// countOut counts a response body's bytes as the API server's.
func (s *session) countOut(body io.ReadCloser) io.ReadCloser {
	return &countReader{ReadCloser: body, n: &s.out}
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
		s.x.h.Logger.Warn("discard unused recording", "session", s.x.adm.req.SessionID, "err", err)
	}
}

// maxEndDetail bounds session.end's end_detail.
const maxEndDetail = 512

// finish ends the session: it commits the recording (or discards it, if
// the relay never started) and emits the session's one session.end, which
// says how the stream ended (reason, one of audit.End…) and why (the lock,
// the error behind it). The proxy adds its own reason if it ended the
// session first (proxy.Kube.SessionEvent).
//
// Only the first call counts, and a nil session (a request that opened
// none) has nothing to end.
func (s *session) finish(ctx context.Context, reason string, err error) {
	if s == nil || !s.ending.CompareAndSwap(false, true) {
		return
	}
	h := s.x.h
	log := h.Logger.With("session", s.x.adm.req.SessionID, "login", s.login)
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
