package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/sessions"
)

// liveMessage is one message of the live view's socket, server to browser
// only. O is output (stdout and stderr, as recorded), R a resize
// ("COLSxROWS"), X the exit status, End the session's end reason (the last
// message).
type liveMessage struct {
	O   string `json:"o,omitempty"`
	R   string `json:"r,omitempty"`
	X   string `json:"x,omitempty"`
	End string `json:"end,omitempty"`
}

// watchable returns the live exec or attach session id, or why it cannot
// be watched.
func (h *Handler) watchable(id string) (sessions.Info, int, error) {
	if h.cfg.Observe == nil {
		return sessions.Info{}, http.StatusNotFound, errors.New("the live view is not available on this proxy")
	}
	info, ok := h.cfg.Sessions.Get(id)
	switch {
	case !ok:
		return info, http.StatusNotFound, fmt.Errorf("no session %s", id)
	case info.Kind != sessions.KindExec && info.Kind != sessions.KindAttach:
		return info, http.StatusBadRequest, fmt.Errorf("session %s is a %s: only exec and attach have output to watch", id, info.Kind)
	case !info.Live():
		return info, http.StatusGone, fmt.Errorf("session %s has ended: play its recording instead", id)
	}
	return info, http.StatusOK, nil
}

func (h *Handler) livePage(w http.ResponseWriter, r *http.Request, s *signin) {
	id := r.PathValue("id")
	info, status, err := h.watchable(id)
	if err != nil {
		h.fail(w, r, s, status, err.Error())
		return
	}
	h.render(w, r, http.StatusOK, "live", s, struct {
		Info   sessions.Info
		Socket string
		Replay string
	}{info, Prefix + "sessions/" + url.PathEscape(id) + "/live.ws", Prefix + "recordings/" + url.PathEscape(id)})
}

// upgrader accepts the live view's socket only from the console's own
// origin (gorilla's default origin check), with no compression.
var upgrader = websocket.Upgrader{ReadBufferSize: 1 << 10, WriteBufferSize: 16 << 10}

// liveWriteTimeout bounds one message to a browser that stopped reading.
const liveWriteTimeout = 10 * time.Second

// liveSocket streams the session's output to an authorized auditor. It is
// audited (session.observe) before the first byte; the browser can send
// nothing that reaches the session: the socket is read only for its close.
func (h *Handler) liveSocket(w http.ResponseWriter, r *http.Request, s *signin) {
	id := r.PathValue("id")
	info, status, err := h.watchable(id)
	if err != nil {
		h.fail(w, r, s, status, err.Error())
		return
	}
	if err := h.emit(r, audit.Event{Type: TypeSessionObserve, Principal: s.p, Cluster: info.Cluster, SessionID: id,
		Fields: map[string]string{"user": info.Principal.String(), "kind": string(info.Kind), "target": info.Target}}); err != nil {
		h.fail(w, r, s, http.StatusServiceUnavailable, "audit trail unavailable, so the session cannot be watched: try again later")
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	src, err := h.cfg.Observe(ctx, info)
	if err != nil {
		h.cfg.Logger.Warn("console: live view unavailable", "session", id, "err", err)
		h.fail(w, r, s, http.StatusBadGateway, "the session's output is not available: "+err.Error())
		return
	}
	defer src.Close()
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade answered
	}
	defer conn.Close()
	// The sign-in admitted the watcher when the socket opened; the guard
	// ends the view as soon as it no longer would.
	var revoked atomic.Pointer[string]
	guarded := make(chan struct{})
	defer func() { <-guarded }()
	defer cancel()
	go func() {
		defer close(guarded)
		h.guardLive(ctx, r, s, func(why string) {
			revoked.Store(&why)
			cancel()
			src.Close()
		})
	}()
	conn.SetReadLimit(1 << 10)
	go func() {
		// Nothing the browser sends is used; reading handles its close.
		for {
			if _, _, err := conn.NextReader(); err != nil {
				cancel()
				src.Close()
				return
			}
		}
	}()
	send := func(m liveMessage) error {
		_ = conn.SetWriteDeadline(time.Now().Add(liveWriteTimeout))
		return conn.WriteJSON(m)
	}
	reason := h.relayLive(src, send)
	if why := revoked.Load(); why != nil {
		h.cfg.Logger.Info("console: live view ended with the watcher's sign-in", "session", id, "watcher", s.p.String(), "why", *why)
		reason = "your sign-in no longer admits you: " + *why
	} else if reason == "" {
		if info, ok := h.cfg.Sessions.Get(id); ok && !info.Live() {
			reason = string(info.Reason)
		} else {
			reason = "ended"
		}
	}
	_ = send(liveMessage{End: reason})
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
		time.Now().Add(time.Second))
}

// liveRecheck is how often a live view checks that its watcher's sign-in
// still admits them (signed out, expired, removed); a lock ends it at once.
const liveRecheck = 200 * time.Millisecond

// guardLive calls stop, once, when s no longer admits the watcher of r's
// live view: a lock set on them (at once), their sign-out, the sign-in's
// expiry or, for a local user, their removal (within liveRecheck). It
// returns then, or when ctx ends.
func (h *Handler) guardLive(ctx context.Context, r *http.Request, s *signin, stop func(why string)) {
	locked, unwatch := h.cfg.Locks.Watch(s.p)
	defer unwatch()
	tick := time.NewTicker(liveRecheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-locked:
		case <-tick.C:
		}
		if err := h.admits(r, s); err != nil {
			stop(err.Error())
			return
		}
	}
}

// admits re-checks, as user does for every request, that r's sign-in is
// still s and admits its user.
func (h *Handler) admits(r *http.Request, s *signin) error {
	now, err := h.check(r)
	if err != nil {
		return err
	}
	// The store answers with a fresh value each time (it may be shared
	// by every proxy): the same sign-in is the same login.
	if now.p.LoginID != s.p.LoginID || !now.p.Same(s.p) {
		return errSignedOut
	}
	return h.lockedOrGone(r, s)
}

// relayLive sends the output, resize and exit events of the recording
// stream src; stdin is never in a recording, and any other code is
// skipped. It returns "" at the stream's end, or why it stopped early.
func (h *Handler) relayLive(src io.Reader, send func(liveMessage) error) string {
	counted := &counter{r: src}
	rd, err := recording.NewReader(counted)
	if err != nil {
		if counted.n == 0 {
			return "" // the session ended before its recording had a header
		}
		return "the recording could not be read: " + err.Error()
	}
	_ = send(liveMessage{R: fmt.Sprintf("%dx%d", rd.Header.Term.Cols, rd.Header.Term.Rows)})
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return ""
		}
		if err != nil {
			return "the recording could not be read: " + err.Error()
		}
		var m liveMessage
		switch ev.Code {
		case "o":
			m.O = ev.Data
		case "r":
			m.R = ev.Data
		case "x":
			m.X = ev.Data
		default:
			continue
		}
		if err := send(m); err != nil {
			return "watcher gone"
		}
	}
}

// counter counts the bytes read through it.
type counter struct {
	r io.Reader
	n int64
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
