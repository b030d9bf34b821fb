// Package sessions is the one vocabulary of streams on both hops: Classify
// decides, as the API server does, whether a request opens a stream and of
// which kind, and a Registry tracks what each hop relays. It lists the live
// sessions (exec, attach, port-forward, watch, followed logs, proxy) and
// ends them when their user is locked, an admin kills them, or their grant
// expires — at once, even when the stream is idle (DESIGN.md §2). Every
// other response is guarded the same way against locks and expiry, without
// being listed.
//
// Each hop (proxy and worker) keeps its own Registry; the proxy pushes kills
// to workers with the messages in wire.go and locks with package locks.
package sessions

import (
	"errors"
	"fmt"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
)

// Kind says what sort of stream a session is. Audit events carry it as the
// session's login (audit.Session.Login) under AuditKind.
type Kind string

// Session kinds; Classify decides which one a request opens.
const (
	// KindNone is a request that opens no stream. Track still ends its
	// response on a lock or the grant's expiry, but does not list it.
	KindNone        Kind = ""
	KindExec        Kind = "exec"
	KindAttach      Kind = "attach"
	KindPortForward Kind = "portforward"
	KindWatch       Kind = "watch"
	// KindLogs is a followed log (pods/log with follow set).
	KindLogs Kind = "logs"
	// KindProxy is a pods/proxy, services/proxy or nodes/proxy request.
	KindProxy Kind = "proxy"
)

// AuditKind is the audit session kind (audit.Session.Kind) of every
// Kubernetes stream; the Kind is its login.
const AuditKind = "kube"

// listed reports whether sessions of kind k are listed and killable.
func (k Kind) listed() bool {
	switch k {
	case KindExec, KindAttach, KindPortForward, KindWatch, KindLogs, KindProxy:
		return true
	}
	return false
}

// Reason says why a session ended; session.end audit events carry it.
type Reason string

// End reasons.
const (
	// ReasonClientClosed: the user hung up.
	ReasonClientClosed Reason = "client_closed"
	// ReasonCompleted: the API server ended the stream (the command exited,
	// the watch timed out).
	ReasonCompleted Reason = "completed"
	ReasonLocked    Reason = "locked"
	ReasonKilled    Reason = "killed"
	// ReasonExpired: the session's grant expired.
	ReasonExpired Reason = "expired"
	ReasonError   Reason = "error"
	// ReasonShutdown: the hop is shutting down.
	ReasonShutdown Reason = "shutdown"
	// ReasonLockViewStale: the proxy could not confirm its lock view for
	// longer than it may (--lock-stale-after, strict mode), so it ended the
	// streams it could no longer vouch for.
	ReasonLockViewStale Reason = "lock_view_stale"
	// ReasonWorkerLost: the tunnel to the worker that carried the stream
	// died mid-stream (the worker crashed, or the network failed): the
	// worker cannot report the end, so the proxy records it.
	ReasonWorkerLost Reason = "worker_lost"
	// ReasonProxyLost: the worker lost the proxy that relayed the stream
	// (the tunnel died under it: the proxy crashed, or the network
	// failed); also the directory's answer for a session of a proxy that
	// stopped beating (it died with its streams).
	ReasonProxyLost Reason = "proxy_lost"
)

// MaxIDLen bounds a session ID.
const MaxIDLen = 128

// Session describes a stream being registered.
type Session struct {
	// ID is the grant's session ID, the same on proxy and worker.
	ID        string
	Principal identity.Principal
	Cluster   string
	Kind      Kind
	// Target is Stream.Target: what the stream is attached to.
	Target string
	// Start defaults to the time of Register.
	Start time.Time
	// Expires is the grant's expiry; the session ends then. Zero: never.
	Expires time.Time
}

func (s Session) validate() error {
	if err := ValidID(s.ID); err != nil {
		return err
	}
	if err := s.Principal.Validate(); err != nil {
		return fmt.Errorf("session %s: %w", s.ID, err)
	}
	if !s.Kind.listed() {
		return fmt.Errorf("session %s: kind %q is not one of exec, attach, portforward, watch, logs, proxy", s.ID, s.Kind)
	}
	return nil
}

// ValidID checks a session ID: 1–128 letters, digits, '.', '_' or '-'.
func ValidID(id string) error {
	if id == "" || len(id) > MaxIDLen {
		return fmt.Errorf("session id must be 1-%d bytes", MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("session id %q: only letters, digits, '.', '_' and '-' are allowed", id)
		}
	}
	return nil
}

// Info is a snapshot of a live or ended session, as `limen sessions ls`
// shows it.
type Info struct {
	ID        string             `json:"id"`
	Principal identity.Principal `json:"principal"`
	Cluster   string             `json:"cluster"`
	Kind      Kind               `json:"kind"`
	Target    string             `json:"target"`
	Start     time.Time          `json:"start"`
	Expires   time.Time          `json:"expires,omitzero"`
	// BytesIn counts bytes from the user, BytesOut bytes to the user.
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	// End is zero while the session is live.
	End    time.Time `json:"end,omitzero"`
	Reason Reason    `json:"reason,omitempty"`
	// Detail explains the reason: the lock, the error.
	Detail string `json:"detail,omitempty"`
	// Proxy names the proxy that relays the session when it is another
	// than the one answering (Directory); empty for its own.
	Proxy string `json:"proxy,omitempty"`
}

// Live reports whether the session had not ended when the snapshot was taken.
func (i Info) Live() bool { return i.End.IsZero() }

// CompleteEnd completes end, the session.end body a worker reported for
// this session, with what this hop knows. When this hop ended the session
// from outside (a lock, a kill, the grant's expiry, shutdown) while its
// stream was still open here, the end is this hop's reason, in its words,
// if all the worker saw was that end reaching it:
//   - its client side going away (client_closed, tunnel_closed);
//   - a clean end (completed), with or without an exit status. Cutting the
//     tunnel ends the command's stdin at the worker, and a shell whose stdin
//     ends exits 0; a port-forward, watch or log just closes. Had the
//     command ended first, its end would have closed the stream here before
//     the lock, and this hop's reason would not be one from outside.
//
// Whatever else the worker found itself (its own watchdog, a truncation, a
// refused chunk) stands, and so do its facts: exit code, bytes, recording.
func (i Info) CompleteEnd(end *audit.Session) {
	if i.Live() || !i.Reason.outside() {
		return
	}
	switch end.EndReason {
	case audit.EndClientClosed, audit.EndTunnelClosed, audit.EndProxyLost, audit.EndCompleted, "":
		end.EndReason, end.EndDetail, end.EndHop = string(i.Reason), i.Detail, audit.HopProxy
	}
}

// outside reports whether r ends a session from outside its stream.
func (r Reason) outside() bool {
	switch r {
	case ReasonLocked, ReasonKilled, ReasonExpired, ReasonShutdown, ReasonLockViewStale:
		return true
	}
	return false
}

// ErrClosed means the registry is shut down and takes no new sessions.
var ErrClosed = errors.New("session registry closed")

// ErrDuplicate means a live session already has the ID.
var ErrDuplicate = errors.New("session id already live")

// Ended is why a session ended; it is the cause of the session's context
// (context.Cause(live.Context())). For ReasonLocked it unwraps to a
// *locks.LockedError, so errors.Is(err, locks.ErrLocked) holds and the
// message names the lock and its reason.
type Ended struct {
	Reason Reason
	// Lock is set for ReasonLocked.
	Lock *locks.Lock
	// Err is set for ReasonError, ReasonWorkerLost and ReasonProxyLost.
	Err error
}

func (e *Ended) Error() string {
	switch {
	case e.Lock != nil:
		return "session ended: " + e.Lock.Describe()
	case e.Err != nil:
		return "session ended: " + e.Err.Error()
	case e.Reason == ReasonExpired:
		return "session ended: grant expired; run the command again to get a new one"
	case e.Reason == ReasonKilled:
		return "session ended: killed by an administrator"
	case e.Reason == ReasonShutdown:
		return "session ended: Limen is shutting down (an upgrade or a restart); run the command again"
	}
	return "session ended: " + string(e.Reason)
}

// Unwrap exposes the lock or the error behind the end.
func (e *Ended) Unwrap() error {
	if e.Lock != nil {
		return &locks.LockedError{Lock: *e.Lock}
	}
	return e.Err
}

// Detail explains the end in words: the lock, the error; "" for the
// other reasons.
func (e *Ended) Detail() string {
	switch {
	case e.Lock != nil:
		return e.Lock.Describe()
	case e.Err != nil:
		return e.Err.Error()
	}
	return ""
}
