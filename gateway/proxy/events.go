package proxy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/grant"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/sessions"
)

// What a worker may report, and how the proxy stores it (DESIGN.md §2: the
// proxy trusts a worker only for the stream it opened). A worker is the hop
// that sees the API server's answer, so its word is taken for what happened
// there (status, verb, bytes, exit code), but never for whom it happened to:
// the principal, the cluster and the session come from the grant the proxy
// signed, and an event that claims otherwise is refused whole, never
// corrected, so that a forgery is seen as one.

// ErrForeignEvent refuses an event a worker may not report: on a request
// stream anything but that stream's own kube.request or worker-hop
// auth.denied; on the control stream anything but a session.start or
// session.end of a session the proxy relayed to that worker's cluster.
var ErrForeignEvent = errors.New("event refused")

// StartFinder finds the session.start the proxy stored for a session: the
// proxy's record of whose session it was once the session registry has
// forgotten it (it keeps only the latest ended sessions, and nothing
// across a restart, while a worker retries a session.end until stored).
// It finds the session.end too, so that a session has only one: the
// proxy's, when it lost the worker (recordLostEnd), or the worker's. The
// audit store is one.
type StartFinder interface {
	SessionStart(ctx context.Context, id string) (audit.Event, bool, error)
	SessionEnd(ctx context.Context, id string) (audit.Event, bool, error)
}

func refuse(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrForeignEvent, fmt.Sprintf(format, a...))
}

// requestEvent checks the one event a worker sends ahead of the response on
// a request stream the proxy opened with grant g for request sr, and returns
// it as the proxy stores it. Only a kube.request, or an auth.denied of the
// worker's own hop, for the stream's session and the grant's principal and
// cluster, with groups among the grant's, is accepted. A worker that could
// not verify the grant knows only the stream's own facts: its auth.denied
// names the session but no principal, and the proxy fills in the grant's
// principal and cluster.
func requestEvent(ev audit.Event, g grant.Grant, sr grant.Request) (audit.Event, error) {
	switch ev.Type {
	case audit.TypeKubeRequest:
	case audit.TypeAuthDenied:
		if ev.Denied.Hop != audit.HopWorker {
			return ev, refuse("a worker reports only its own refusals, not the %s's", ev.Denied.Hop)
		}
		if ev.Denied.Action != audit.ActionKube {
			return ev, refuse("a worker refuses only kube requests, not %s", ev.Denied.Action)
		}
	default:
		return ev, refuse("a request stream carries kube.request or auth.denied, not %s", ev.Type)
	}
	if ev.SessionID != sr.SessionID {
		return ev, refuse("%s for session %q on the stream of session %q", ev.Type, ev.SessionID, sr.SessionID)
	}
	// A worker that refused the grant unread (forged, expired, for a
	// cluster it does not serve) names no principal, and its cluster is
	// only its own configuration: the refusal is stored under the grant's.
	unverified := ev.Type == audit.TypeAuthDenied && isZero(ev.Principal)
	if !unverified && !samePrincipal(ev.Principal, g.Principal) {
		return ev, refuse("%s names %s, the grant was signed for %s", ev.Type, ev.Principal, g.Principal)
	}
	if !unverified && ev.Cluster != g.Cluster {
		return ev, refuse("%s for cluster %q on a stream to cluster %q", ev.Type, ev.Cluster, g.Cluster)
	}
	for _, grp := range ev.Groups {
		if !slices.Contains(g.Groups, grp) {
			return ev, refuse("%s names group %q, which the grant does not carry", ev.Type, grp)
		}
	}
	ev.ID = 0
	ev.SessionID, ev.Principal, ev.Cluster, ev.ClientAddr = sr.SessionID, g.Principal, g.Cluster, sr.ClientAddr
	return ev, nil
}

// workerEventTypes are the only events a worker sends on its control
// stream: each stream's one start and one end (gateway/worker session.go).
// Its kube.request and auth.denied travel on the request stream instead.
var workerEventTypes = []audit.Type{audit.TypeSessionStart, audit.TypeSessionEnd}

// SessionEvent stores a session.start or session.end that a worker of
// cluster sent on its control stream, and returns nil once it is durable.
// The worker is the one hop that sees a stream whole (the recording, the
// exit code, how the API server ended it), so it reports each session's one
// start and one end; this proxy adds what only it knows. The session must
// be one the proxy relayed to cluster, and the principal is the proxy's
// (sessionOwner): an event naming another is refused. A session.end is
// completed with the proxy's reason for ending it (sessions.Info.CompleteEnd):
// a lock, kill or expiry the proxy enforced first reaches the worker only as
// its client side closing.
func (k *Kube) SessionEvent(ctx context.Context, cluster string, ev audit.Event) error {
	if !slices.Contains(workerEventTypes, ev.Type) {
		return refuse("event type %q may not be sent on the control stream", ev.Type)
	}
	if ev.Cluster != cluster {
		return refuse("a worker of cluster %q may not report for cluster %q", cluster, ev.Cluster)
	}
	owner, info, err := k.sessionOwner(ctx, cluster, ev)
	if err != nil {
		return err
	}
	if !samePrincipal(ev.Principal, owner) {
		return refuse("%s of session %s names %s, the proxy relayed it for %s", ev.Type, ev.SessionID, ev.Principal, owner)
	}
	ev.ID, ev.Principal = 0, owner
	if ev.Type == audit.TypeSessionEnd && k.Starts != nil {
		// A session has one end. The worker's comes after the proxy's when
		// the proxy lost the tunnel while the worker lived on (a network
		// failure) and the worker delivers its end once it is back; or
		// twice when an acknowledgement was lost. It is acknowledged, not
		// stored again.
		prev, ok, err := k.Starts.SessionEnd(ctx, ev.SessionID)
		if err != nil {
			return fmt.Errorf("look up the end of session %s: %w", ev.SessionID, err)
		}
		if ok {
			k.Logger.Info("session.end from the worker not stored: the session has one already", "session", ev.SessionID,
				"stored_reason", prev.Session.EndReason, "stored_hop", prev.Session.EndHop, "worker_reason", ev.Session.EndReason)
			return nil
		}
	}
	if info != nil && ev.Type == audit.TypeSessionEnd && ev.Session != nil {
		end := *ev.Session
		info.CompleteEnd(&end)
		ev.Session = &end
	}
	return k.Audit.Emit(ctx, ev)
}

// sessionOwner finds whose session ev is, from the proxy's own records:
// the session registry while it remembers the session, else, for a
// session.end, the session.start the proxy stored (Kube.Starts). A session
// the proxy did not relay to cluster is refused; so is any session.start
// the registry does not know, since it arrives while the proxy relays it.
func (k *Kube) sessionOwner(ctx context.Context, cluster string, ev audit.Event) (identity.Principal, *sessions.Info, error) {
	id := ev.SessionID
	if id == "" {
		return identity.Principal{}, nil, refuse("%s names no session", ev.Type)
	}
	if k.Sessions != nil {
		if info, ok := k.Sessions.Get(id); ok {
			if info.Cluster != cluster {
				return identity.Principal{}, nil, refuse("session %s was relayed to cluster %q, not %q", id, info.Cluster, cluster)
			}
			return info.Principal, &info, nil
		}
	}
	if ev.Type == audit.TypeSessionEnd && k.Starts != nil {
		start, ok, err := k.Starts.SessionStart(ctx, id)
		if err != nil {
			return identity.Principal{}, nil, fmt.Errorf("look up the start of session %s: %w", id, err)
		}
		if ok {
			if start.Cluster != cluster {
				return identity.Principal{}, nil, refuse("session %s started on cluster %q, not %q", id, start.Cluster, cluster)
			}
			return start.Principal, nil, nil
		}
	}
	return identity.Principal{}, nil, refuse("%s for session %s, which this proxy did not relay", ev.Type, id)
}

// samePrincipal reports whether an event's principal is the proxy's: same
// kind, provenance and name (identity.Principal.Same). The traits stored
// are always the proxy's.
func samePrincipal(claimed, own identity.Principal) bool { return claimed.Same(own) }

func isZero(p identity.Principal) bool { return p.Kind == "" && p.Name == "" }

// RecordingOf checks that a worker of cluster may upload the recording of
// session id: an exec or attach the proxy relayed to that cluster, by the
// session registry or, once it has forgotten the session (uploads wait in a
// spool across restarts), by the session.start the proxy stored. Any other
// recording is refused (ErrForeignEvent): a worker cannot plant one under
// another cluster's session, which `limen play` might find first.
func (k *Kube) RecordingOf(ctx context.Context, cluster, id string) error {
	if k.Sessions != nil {
		if info, ok := k.Sessions.Get(id); ok {
			return recordedOn(id, cluster, info.Cluster, string(info.Kind))
		}
	}
	if k.Starts != nil {
		start, ok, err := k.Starts.SessionStart(ctx, id)
		if err != nil {
			return fmt.Errorf("look up the start of session %s: %w", id, err)
		}
		if ok && start.Session != nil {
			return recordedOn(id, cluster, start.Cluster, start.Session.Login)
		}
	}
	return refuse("recording of session %s, which this proxy did not relay", id)
}

func recordedOn(id, cluster, relayedTo, kind string) error {
	if relayedTo != cluster {
		return refuse("recording of session %s, which was relayed to cluster %q, not %q", id, relayedTo, cluster)
	}
	if kind != string(sessions.KindExec) && kind != string(sessions.KindAttach) {
		return refuse("recording of session %s, a %s, which Limen does not record", id, kind)
	}
	return nil
}

// lostEndTimeout bounds the proxy's own session.end of a stream whose
// worker it lost.
const lostEndTimeout = 10 * time.Second

// recordLostEnd stores the session.end of a stream whose worker was lost
// mid-stream (sessions.ReasonWorkerLost): the worker, the hop that reports
// each end, crashed or cannot be reached, so the proxy reports it, as
// worker_lost, from the session.start the worker stored and what the proxy
// itself saw (duration, bytes). A stream with no session.start never ran
// upstream and has no end. The worker, if it lived on, delivers its own end
// later, and SessionEvent keeps the first.
func (k *Kube) recordLostEnd(ctx context.Context, info sessions.Info) {
	if k.Starts == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lostEndTimeout)
	defer cancel()
	log := k.Logger.With("session", info.ID, "cluster", info.Cluster)
	start, ok, err := k.Starts.SessionStart(ctx, info.ID)
	if err != nil {
		log.ErrorContext(ctx, "worker lost: session.end not stored: its session.start cannot be read", "err", err)
		return
	}
	if !ok || start.Session == nil {
		return
	}
	if _, ok, err := k.Starts.SessionEnd(ctx, info.ID); err != nil || ok {
		return // the worker's end came first, or the store cannot say: its end stands
	}
	body := *start.Session
	body.EndReason, body.EndHop, body.EndDetail = audit.EndWorkerLost, audit.HopProxy, info.Detail
	if len(body.EndDetail) > maxEndDetail {
		body.EndDetail = body.EndDetail[:maxEndDetail] + "…"
	}
	body.Duration = info.End.Sub(info.Start)
	body.BytesIn, body.BytesOut = info.BytesIn, info.BytesOut
	ev := start
	ev.ID, ev.Type, ev.Time, ev.Session = 0, audit.TypeSessionEnd, k.Now(), &body
	if err := k.Audit.Emit(ctx, ev); err != nil {
		log.ErrorContext(ctx, "worker lost: session.end not stored", "err", err)
		return
	}
	log.WarnContext(ctx, "worker lost mid-stream: the proxy recorded the session's end", "login", body.Login)
}

// maxEndDetail bounds the end_detail of a session.end the proxy records.
const maxEndDetail = 512
