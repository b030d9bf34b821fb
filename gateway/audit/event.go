// Package audit defines Limen's audit events, their wire encoding on a tunnel
// stream, and the proxy's durable store for them.
//
// The rule the package serves (DESIGN.md §2–3): a response is relayed only
// after its event is durably accepted. A Sink's Emit returns nil only then;
// any error means "not recorded", and the caller answers 503 and drops the
// response. Errors about the store itself wrap ErrUnavailable.
package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

// Type names an event; it is "area.action", lower case.
type Type string

// Event types Limen emits.
const (
	// TypeKubeRequest is a request's outcome, as the worker saw the API
	// server answer it (status, latency, the groups impersonated).
	TypeKubeRequest Type = "kube.request"
	// TypeKubeSent is the proxy's record of a request it forwards (who,
	// where, what, as which granted groups), made durable while the request
	// travels to the API server: the response is relayed only once it is,
	// and the request's kube.request (or the worker's auth.denied, for the
	// same session id) follows as its outcome. A kube.sent without one is a
	// request whose outcome is unknown (Search sets OutcomeUnknown).
	TypeKubeSent     Type = "kube.sent"
	TypeAuthDenied   Type = "auth.denied"
	TypeAuthLogin    Type = "auth.login"
	TypeSessionStart Type = "session.start"
	TypeSessionEnd   Type = "session.end"
	TypeTokenCreate  Type = "token.create"
	TypeTokenUse     Type = "token.use"
	TypeUserAdd      Type = "user.add"
	TypeUserRemove   Type = "user.remove"
	TypeUserPasswd   Type = "user.passwd"
	TypeUserLock     Type = "user.lock"
	TypeUserUnlock   Type = "user.unlock"
	TypeSessionKill  Type = "session.kill"
	// The steps of an access request (gateway/requests): made, approved
	// (once per approver), denied, expired (its access ended, or it lapsed
	// unapproved) and first used by a proxy. Fields name the request, role,
	// cluster, requester and the reason given.
	TypeAccessRequest Type = "access.request"
	TypeAccessApprove Type = "access.approve"
	TypeAccessDeny    Type = "access.deny"
	TypeAccessExpire  Type = "access.expire"
	TypeAccessUse     Type = "access.use"
	// TypeAuditRetention is one run of --audit-retention: how many events
	// it deleted, and how many old ones it kept because an export had not
	// delivered them yet.
	TypeAuditRetention Type = "audit.retention"
)

// Hops at which a refusal can happen.
const (
	HopProxy  = "proxy"
	HopWorker = "worker"
)

// Event is one audit record. Common fields sit at the top; exactly one of
// Kube, Denied and Session is set for the types that need it, and admin
// events carry free-form Fields.
type Event struct {
	// ID is the store's sequence number, set by Search; zero otherwise.
	ID   int64     `json:"id,omitempty"`
	Type Type      `json:"type"`
	Time time.Time `json:"time"`
	// Principal is the user or bot who acted; zero when unknown (for
	// example a denied request without a valid certificate).
	Principal identity.Principal `json:"principal"`
	Groups    []string           `json:"groups,omitempty"`
	// KubeUser is the Kubernetes user name the worker impersonated (its
	// --kube-user-prefix and the client's prefix included): the worker's
	// word, on its kube.request and session events; empty elsewhere and
	// from workers that predate it.
	KubeUser   string `json:"kube_user,omitempty"`
	Cluster    string `json:"cluster,omitempty"`
	SessionID  string `json:"session_id,omitempty"`
	ClientAddr string `json:"client_addr,omitempty"`

	Kube    *KubeRequest `json:"kube,omitempty"`
	Denied  *Denied      `json:"denied,omitempty"`
	Session *Session     `json:"session,omitempty"`
	// Fields carries the details of admin events (token.create, user.add, …).
	Fields map[string]string `json:"fields,omitempty"`

	// OutcomeUnknown is set by Search on a kube.sent whose outcome (the
	// kube.request or the worker's auth.denied of its session id) is not
	// stored: the request is still under way, or its outcome was lost (the
	// proxy stopped, the worker went away or answered with something the
	// proxy refused, the audit trail failed after the request left).
	// PossiblyApplied adds that the request may have changed something
	// (KubeRequest.Mutating): it may have been applied, and is not fully
	// audited. Neither is ever stored.
	OutcomeUnknown  bool `json:"outcome_unknown,omitempty"`
	PossiblyApplied bool `json:"possibly_applied,omitempty"`
}

// KubeRequest is the body of a kube.request event. Path never has a query.
type KubeRequest struct {
	Verb        string        `json:"verb"`
	APIGroup    string        `json:"api_group,omitempty"`
	APIVersion  string        `json:"api_version,omitempty"`
	Resource    string        `json:"resource,omitempty"`
	Subresource string        `json:"subresource,omitempty"`
	Namespace   string        `json:"namespace,omitempty"`
	Name        string        `json:"name,omitempty"`
	Method      string        `json:"method"`
	Path        string        `json:"path"`
	Status      int           `json:"status"`
	Latency     time.Duration `json:"latency_ns"`
	// UserAgent is the client's User-Agent, cut to MaxUserAgent bytes;
	// empty when the client sent none (and from workers that predate it).
	UserAgent string `json:"user_agent,omitempty"`
}

// MaxUserAgent bounds KubeRequest.UserAgent: enough for kubectl's and
// client-go's, short enough that no client fills the audit store with it.
const MaxUserAgent = 256

// Mutating reports whether the request may change something in the cluster:
// any method but GET, HEAD and OPTIONS, and an exec, attach or port-forward
// whatever its method (kubectl ≥ 1.30 execs with a GET upgrade).
func (k *KubeRequest) Mutating() bool {
	switch k.Method {
	case "GET", "HEAD", "OPTIONS":
	default:
		return true
	}
	switch k.Subresource {
	case "exec", "attach", "portforward":
		return true
	}
	return false
}

// Denied is the body of an auth.denied event.
type Denied struct {
	// Hop is HopProxy or HopWorker.
	Hop string `json:"hop"`
	// Action is what was refused: one of the Action… values.
	Action string `json:"action"`
	Reason string `json:"reason"`
	Path   string `json:"path,omitempty"`
	// Count is how many refusals the event stands for when refusals of
	// unauthenticated clients were aggregated (Aggregator); 0 means one.
	Count int `json:"count,omitempty"`
}

// What an auth.denied refused (Denied.Action), so that search can tell a
// refused kubectl request from a refused admin call.
const (
	// ActionKube: a request to a cluster (/k8s/), at either hop.
	ActionKube = "kube"
	// ActionAdmin: an admin call (/v1/admin/…), or another call that needs
	// a certificate (whoami, clusters).
	ActionAdmin = "admin"
	// ActionLogin: a login (/v1/login).
	ActionLogin = "login"
	// ActionEnroll: a worker enrollment with a join token (/v1/enroll).
	ActionEnroll = "enroll"
	// ActionAccess: an access request made, approved or denied
	// (/v1/requests).
	ActionAccess = "access"
)

// ValidAction reports whether a is one of the Action… values.
func ValidAction(a string) bool {
	return a == ActionKube || a == ActionAdmin || a == ActionLogin || a == ActionEnroll || a == ActionAccess
}

// Session is the body of session.start and session.end events.
type Session struct {
	// Kind is "kube" for Kubernetes streams.
	Kind string `json:"kind"`
	// Login is what the stream is (sessions.Kind): exec, attach,
	// portforward, watch, logs or proxy.
	Login     string   `json:"login"`
	Namespace string   `json:"namespace,omitempty"`
	Pod       string   `json:"pod,omitempty"`
	Container string   `json:"container,omitempty"`
	Command   []string `json:"command,omitempty"`
	Ports     []string `json:"ports,omitempty"`
	// Target names what the stream is attached to, as `limen sessions ls`
	// shows it: namespace/pod/container for exec, attach and logs,
	// namespace/resource[/name] for a watch, resource/namespace/name for
	// proxy.
	Target string `json:"target,omitempty"`
	// The rest is known only at session.end.
	ExitCode        *int          `json:"exit_code,omitempty"`
	BytesIn         int64         `json:"bytes_in,omitempty"`
	BytesOut        int64         `json:"bytes_out,omitempty"`
	Duration        time.Duration `json:"duration_ns,omitempty"`
	RecordingSHA256 string        `json:"recording_sha256,omitempty"`
	// EndReason says how the stream ended (one of the End… values).
	EndReason string `json:"end_reason,omitempty"`
	// EndDetail says it in words: the lock, the error.
	EndDetail string `json:"end_detail,omitempty"`
	// EndHop is the hop that saw the end first-hand (HopWorker: the relay
	// or the worker's watchdog; HopProxy: the proxy ended the session, by
	// a lock, kill, expiry or shutdown, and the worker saw only its side
	// close).
	EndHop string `json:"end_hop,omitempty"`
}

// How a stream ended, as session.end's end_reason says. The first seven are
// the relay's own findings; the rest name an end from outside the stream,
// in the words of the session registry (gateway/sessions).
const (
	// EndCompleted: the API server ended the stream in good order (for exec
	// and attach, after the command's exit status).
	EndCompleted = "completed"
	// EndTruncated: the API server's bytes stopped inside a frame or before
	// the exit status; the client was told the stream failed.
	EndTruncated = "truncated"
	// EndUpstreamReset: the connection to the API server failed (a reset)
	// before the stream was complete; the client was told it failed.
	EndUpstreamReset = "upstream_reset"
	// EndClientClosed: the user hung up before the API server ended.
	EndClientClosed = "client_closed"
	// EndDecodeFailed: the stream could not be decoded, so Limen ended it.
	EndDecodeFailed = "decode_failed"
	// EndRecordFailed: the recording could not be written, so Limen ended it.
	EndRecordFailed = "record_failed"
	// EndRecordingCap: the recording reached the worker's cap
	// (--recording-max-bytes), so Limen ended the stream.
	EndRecordingCap = "recording_cap"
	EndLocked       = "locked"
	EndKilled       = "killed"
	EndExpired      = "expired"
	EndShutdown     = "shutdown"
	// EndTunnelClosed: the tunnel between proxy and worker went away.
	EndTunnelClosed = "tunnel_closed"
	// EndWorkerLost: the proxy lost the worker mid-stream (its tunnel
	// died: the worker crashed or the network between them failed), so
	// the proxy, not the worker, recorded the end.
	EndWorkerLost = "worker_lost"
	// EndProxyLost: the worker lost the proxy that relayed the stream
	// mid-stream (the tunnel died without the proxy shutting down: it
	// crashed or the network failed).
	EndProxyLost = "proxy_lost"
	EndError     = "error"
	// EndNotStarted: the API server answered without opening the stream
	// (the request's kube.request has its status); nothing ran.
	EndNotStarted = "not_started"
)

var endReasons = map[string]bool{
	EndCompleted: true, EndTruncated: true, EndUpstreamReset: true, EndClientClosed: true,
	EndDecodeFailed: true, EndRecordFailed: true, EndRecordingCap: true, EndLocked: true, EndKilled: true,
	EndExpired: true, EndShutdown: true, EndTunnelClosed: true, EndError: true, EndNotStarted: true,
	EndWorkerLost: true, EndProxyLost: true,
}

// Sink accepts events. Emit returns nil only once e is durably recorded; an
// error means it was not, and the caller must not relay the response it
// describes.
type Sink interface {
	Emit(ctx context.Context, e Event) error
}

// ErrUnavailable means the audit trail cannot record events now (store
// closed, disk or database error, commit not confirmed). Callers answer 503.
var ErrUnavailable = errors.New("audit trail unavailable")

// ErrInvalid means the event itself is malformed: a bug in the emitter or a
// hostile peer. It is never recorded.
var ErrInvalid = errors.New("invalid audit event")

// Validate checks the event's shape; errors wrap ErrInvalid.
func (e Event) Validate() error {
	if err := e.validate(); err != nil {
		return fmt.Errorf("%s event: %w: %w", clip(string(e.Type)), err, ErrInvalid)
	}
	return nil
}

func (e Event) validate() error {
	if !validType(e.Type) {
		return errors.New("type must be area.action in lower case")
	}
	if e.Time.IsZero() {
		return errors.New("no time")
	}
	if e.Principal.Kind != "" || e.Principal.Name != "" {
		if err := e.Principal.Validate(); err != nil {
			return err
		}
	}
	bodies := 0
	for _, set := range []bool{e.Kube != nil, e.Denied != nil, e.Session != nil} {
		if set {
			bodies++
		}
	}
	if bodies > 1 {
		return errors.New("more than one of kube, denied and session is set")
	}
	switch e.Type {
	case TypeKubeRequest, TypeKubeSent:
		return e.Kube.validate()
	case TypeAuthDenied:
		return e.Denied.validate()
	case TypeSessionStart, TypeSessionEnd:
		if e.Session == nil || e.Session.Kind == "" || e.Session.Login == "" {
			return errors.New("session kind and login are required")
		}
		if r := e.Session.EndReason; r != "" && (e.Type == TypeSessionStart || !endReasons[r]) {
			return fmt.Errorf("end_reason %q is not a known end of a %s", clip(r), e.Type)
		}
		if h := e.Session.EndHop; h != "" && (e.Type == TypeSessionStart || h != HopProxy && h != HopWorker) {
			return fmt.Errorf("end_hop %q is not a hop that ends a %s", clip(h), e.Type)
		}
	}
	return nil
}

func (k *KubeRequest) validate() error {
	switch {
	case k == nil:
		return errors.New("kube body missing")
	case k.Method == "" || k.Path == "":
		return errors.New("method and path are required")
	case strings.ContainsAny(k.Path, "?#"):
		return errors.New("path carries a query or fragment; audit records paths without them")
	case k.Status < 0 || k.Status > 999:
		return fmt.Errorf("status %d out of range", k.Status)
	}
	return nil
}

func (d *Denied) validate() error {
	switch {
	case d == nil:
		return errors.New("denied body missing")
	case d.Hop != HopProxy && d.Hop != HopWorker:
		return fmt.Errorf("hop %q, want %q or %q", clip(d.Hop), HopProxy, HopWorker)
	case !ValidAction(d.Action):
		return fmt.Errorf("action %q, want %s, %s, %s or %s", clip(d.Action), ActionKube, ActionAdmin, ActionLogin, ActionEnroll)
	case d.Reason == "":
		return errors.New("reason is required")
	case d.Count < 0:
		return fmt.Errorf("count %d is negative", d.Count)
	}
	// Path is not checked: a refused request's path may be anything,
	// including the non-canonical spelling that caused the refusal.
	return nil
}

func validType(t Type) bool {
	s := string(t)
	if len(s) == 0 || len(s) > 64 || !strings.Contains(s, ".") || s[0] == '.' || s[len(s)-1] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
