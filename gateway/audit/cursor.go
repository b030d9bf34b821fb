package audit

import (
	"context"
	"fmt"
	"time"
)

// The reads audit export and retention need. Both rely on one property
// every engine keeps (store.Audit): an event's id, its sequence number,
// grows with commit order, so that a reader that has seen every event up to
// an id never sees one committed below it later. SQLite has one writer at
// a time; PostgreSQL serializes the audit commits of every proxy with a
// transaction-level advisory lock, since a sequence alone is handed out in
// one order and committed in another.

// EventsAfter returns up to limit events whose id is above afterSeq, in id
// order, with ID set: the next batch of a reader that has seen every event
// up to afterSeq. kube.sent events are included (Search hides them); the
// outcome flags are not computed.
func (s *Store) EventsAfter(ctx context.Context, afterSeq int64, limit int) ([]Event, error) {
	if limit <= 0 {
		return nil, nil
	}
	recs, err := s.db.After(ctx, afterSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("audit events after %d: %w", afterSeq, wrapUnavailable(err))
	}
	out := make([]Event, 0, len(recs))
	for _, r := range recs {
		e, err := decode(r)
		if err != nil {
			return nil, fmt.Errorf("audit events after %d: %w", afterSeq, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// DeleteBefore deletes up to limit of the oldest events stored before t
// whose id is at most throughSeq (the last event every exporter has
// delivered; math.MaxInt64 when nothing exports), and returns how many it
// deleted. A caller deletes in batches until fewer than limit are deleted,
// so that no one transaction holds the writer for long.
func (s *Store) DeleteBefore(ctx context.Context, t time.Time, throughSeq int64, limit int) (int, error) {
	if s.readOnly {
		return 0, fmt.Errorf("audit delete: store opened read-only: %w", ErrUnavailable)
	}
	if limit <= 0 {
		return 0, nil
	}
	n, err := s.db.DeleteBefore(ctx, t.UnixNano(), throughSeq, limit)
	if err != nil {
		return 0, fmt.Errorf("audit delete before %s: %w", t.UTC().Format(time.RFC3339), wrapUnavailable(err))
	}
	return int(n), nil
}

// Span is what the store holds, as export and retention report it.
type Span struct {
	// First and Last are the lowest and highest ids stored; both zero
	// when the store is empty.
	First, Last int64
	// Oldest is the time of the oldest event kept; zero when empty.
	Oldest time.Time
}

// Span reads the ids and the oldest time the store holds.
func (s *Store) Span(ctx context.Context) (Span, error) {
	first, last, oldest, err := s.db.Span(ctx)
	if err != nil {
		return Span{}, fmt.Errorf("audit span: %w", wrapUnavailable(err))
	}
	sp := Span{First: first, Last: last}
	if last != 0 {
		sp.Oldest = time.Unix(0, oldest)
	}
	return sp, nil
}
