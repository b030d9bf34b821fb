package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/limenhq/limen/gateway/store"
)

// Query selects events for Search. Empty fields match everything.
type Query struct {
	// User matches the principal's name ("alice") or kind:name ("bot:ci").
	User    string
	Cluster string
	Verb    string
	Type    Type
	// Action keeps auth.denied events that refused this (ActionKube, …).
	Action string
	// OutcomeUnknown keeps only the kube.sent events whose outcome is not
	// stored (Event.OutcomeUnknown).
	OutcomeUnknown bool
	// Since keeps events at or after this time; zero keeps all.
	Since time.Time
	// Limit keeps the newest Limit events; 0 means 1000.
	Limit int
}

// Search returns the newest events matching q, oldest first. A kube.sent
// whose outcome is stored says nothing its kube.request does not, so it is
// left out unless q.Type asks for kube.sent; one without an outcome is
// returned with OutcomeUnknown (and PossiblyApplied) set.
func (s *Store) Search(ctx context.Context, q Query) ([]Event, error) {
	if q.Limit <= 0 {
		q.Limit = 1000
	}
	dq := store.AuditQuery{User: q.User, Cluster: q.Cluster, Verb: q.Verb, Type: string(q.Type), Action: q.Action,
		OutcomeUnknown: q.OutcomeUnknown, Limit: q.Limit}
	if !q.Since.IsZero() {
		dq.SinceNS = q.Since.UnixNano()
	}
	recs, err := s.db.Search(ctx, dq)
	if err != nil {
		return nil, fmt.Errorf("audit search: %w", wrapUnavailable(err))
	}
	out := make([]Event, 0, len(recs))
	// The engine answers newest first; Search returns oldest first.
	for i := len(recs) - 1; i >= 0; i-- {
		e, err := decode(recs[i])
		if err != nil {
			return nil, fmt.Errorf("audit search: %w", err)
		}
		if recs[i].OutcomeUnknown && e.Kube != nil {
			e.OutcomeUnknown, e.PossiblyApplied = true, e.Kube.Mutating()
		}
		out = append(out, e)
	}
	return out, nil
}

// decode is the event of r, with ID set.
func decode(r store.AuditRecord) (Event, error) {
	var e Event
	if err := json.Unmarshal(r.Data, &e); err != nil {
		return Event{}, fmt.Errorf("event %d is corrupt: %w", r.Seq, err)
	}
	e.ID = r.Seq
	return e, nil
}

func wrapUnavailable(err error) error {
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// SessionStart returns the first session.start stored for session id, and
// whether there is one.
func (s *Store) SessionStart(ctx context.Context, id string) (Event, bool, error) {
	return s.sessionEvent(ctx, id, TypeSessionStart)
}

// SessionEnd returns the first session.end stored for session id, and
// whether there is one (the console shows its exit status and duration).
func (s *Store) SessionEnd(ctx context.Context, id string) (Event, bool, error) {
	return s.sessionEvent(ctx, id, TypeSessionEnd)
}

func (s *Store) sessionEvent(ctx context.Context, id string, typ Type) (Event, bool, error) {
	if id == "" {
		return Event{}, false, nil
	}
	r, ok, err := s.db.SessionEvent(ctx, id, string(typ))
	if err != nil {
		return Event{}, false, fmt.Errorf("audit: %s of %s: %w", typ, id, wrapUnavailable(err))
	}
	if !ok {
		return Event{}, false, nil
	}
	e, err := decode(r)
	if err != nil {
		return Event{}, false, fmt.Errorf("audit: %s of %s: %w", typ, id, err)
	}
	e.ID = 0 // as before: the session's events are read for their fields
	return e, true, nil
}
