package audit

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
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

// outcomeMissing holds for a kube.sent row (the table's name is events)
// whose session id has no outcome: no kube.request and no auth.denied, the
// worker's answer. The condition that o.session_id is not empty lets
// SQLite use the partial index events_session.
const outcomeMissing = `NOT EXISTS (SELECT 1 FROM events AS o WHERE o.session_id = events.session_id
	AND o.session_id != '' AND o.type IN ('` + string(TypeKubeRequest) + `', '` + string(TypeAuthDenied) + `'))`

// unknownOutcome is the column Search reads Event.OutcomeUnknown from.
const unknownOutcome = `(type = '` + string(TypeKubeSent) + `' AND ` + outcomeMissing + `)`

// Search returns the newest events matching q, oldest first. A kube.sent
// whose outcome is stored says nothing its kube.request does not, so it is
// left out unless q.Type asks for kube.sent; one without an outcome is
// returned with OutcomeUnknown (and PossiblyApplied) set.
func (s *Store) Search(ctx context.Context, q Query) ([]Event, error) {
	var where []string
	var args []any
	add := func(cond string, a ...any) { where = append(where, cond); args = append(args, a...) }
	if q.User != "" {
		add("(name = ? OR who = ?)", q.User, q.User)
	}
	if q.Cluster != "" {
		add("cluster = ?", q.Cluster)
	}
	if q.Verb != "" {
		add("verb = ?", q.Verb)
	}
	if q.Type != "" {
		add("type = ?", string(q.Type))
	}
	if q.Action != "" {
		// No column of its own: a refusal's action is read from its body.
		add("type = ? AND json_extract(data, '$.denied.action') = ?", string(TypeAuthDenied), q.Action)
	}
	if !q.Since.IsZero() {
		add("time_ns >= ?", q.Since.UnixNano())
	}
	switch {
	case q.OutcomeUnknown:
		add(unknownOutcome)
	case q.Type == "":
		add("(type != ? OR "+outcomeMissing+")", string(TypeKubeSent))
	}
	if q.Limit <= 0 {
		q.Limit = 1000
	}
	query := "SELECT id, data, " + unknownOutcome + " FROM events"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY time_ns DESC, id DESC LIMIT ?"
	args = append(args, q.Limit)
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("audit search: %w", wrapUnavailable(err))
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var id int64
		var data []byte
		var unknown bool
		if err := rows.Scan(&id, &data, &unknown); err != nil {
			return nil, fmt.Errorf("audit search: %w", err)
		}
		var e Event
		if err := json.Unmarshal(data, &e); err != nil {
			return nil, fmt.Errorf("audit search: event %d is corrupt: %w", id, err)
		}
		e.ID = id
		if unknown && e.Kube != nil {
			e.OutcomeUnknown, e.PossiblyApplied = true, e.Kube.Mutating()
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("audit search: %w", wrapUnavailable(err))
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

func wrapUnavailable(err error) error {
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

const sessionEventQuery = `SELECT data FROM events WHERE session_id = ? AND session_id != '' AND type = ? ORDER BY id LIMIT 1`

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
	var data []byte
	if id == "" {
		return Event{}, false, nil
	}
	// "session_id != ''" lets SQLite use the partial index events_session:
	// without it, every lookup scans the whole table.
	err := s.db.QueryRowContext(ctx, sessionEventQuery, id, string(typ)).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return Event{}, false, nil
	}
	if err != nil {
		return Event{}, false, fmt.Errorf("audit: %s of %s: %w", typ, id, wrapUnavailable(err))
	}
	var e Event
	if err := json.Unmarshal(data, &e); err != nil {
		return Event{}, false, fmt.Errorf("audit: %s of %s is corrupt: %w", typ, id, err)
	}
	return e, true, nil
}
