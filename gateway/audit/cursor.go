package audit

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// The queries audit export and retention need, kept together so that the
// store's second engine (PostgreSQL) has one small file to port. Both rely
// on one property of the events table: an event's id (its sequence number)
// grows with commit order. SQLite has one writer at a time and AUTOINCREMENT
// never reuses an id, so an event committed later always has a higher id and
// none is ever committed below an id a reader has already seen. (A
// PostgreSQL port must keep that: a sequence alone does not, since
// concurrent transactions commit out of sequence order.)

// EventsAfter returns up to limit events whose id is above afterSeq, in id
// order, with ID set: the next batch of a reader that has seen every event
// up to afterSeq. kube.sent events are included (Search hides them); the
// outcome flags are not computed.
func (s *Store) EventsAfter(ctx context.Context, afterSeq int64, limit int) ([]Event, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := s.db.QueryContext(ctx, "SELECT id, data FROM events WHERE id > ? ORDER BY id LIMIT ?", afterSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("audit events after %d: %w", afterSeq, wrapUnavailable(err))
	}
	defer rows.Close()
	out := make([]Event, 0, limit)
	for rows.Next() {
		var id int64
		var data []byte
		if err := rows.Scan(&id, &data); err != nil {
			return nil, fmt.Errorf("audit events after %d: %w", afterSeq, wrapUnavailable(err))
		}
		var e Event
		if err := json.Unmarshal(data, &e); err != nil {
			return nil, fmt.Errorf("audit events after %d: event %d is corrupt: %w", afterSeq, id, err)
		}
		e.ID = id
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("audit events after %d: %w", afterSeq, wrapUnavailable(err))
	}
	return out, nil
}

// DeleteBefore deletes up to limit of the oldest events stored before t
// whose id is at most throughSeq (the last event every exporter has
// delivered; pass math.MaxInt64 when nothing exports), and returns how many
// it deleted. A caller deletes in batches until fewer than limit are
// deleted, so that no one transaction holds the writer for long.
func (s *Store) DeleteBefore(ctx context.Context, t time.Time, throughSeq int64, limit int) (int, error) {
	if s.readOnly {
		return 0, fmt.Errorf("audit delete: store opened read-only: %w", ErrUnavailable)
	}
	if limit <= 0 {
		return 0, nil
	}
	res, err := s.db.ExecContext(ctx, `DELETE FROM events WHERE id IN
		(SELECT id FROM events WHERE time_ns < ? AND id <= ? ORDER BY id LIMIT ?)`, t.UnixNano(), throughSeq, limit)
	if err != nil {
		return 0, fmt.Errorf("audit delete before %s: %w", t.UTC().Format(time.RFC3339), wrapUnavailable(err))
	}
	n, err := res.RowsAffected()
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
	var first, last, oldest sql.NullInt64
	err := s.db.QueryRowContext(ctx, "SELECT min(id), max(id), min(time_ns) FROM events").Scan(&first, &last, &oldest)
	if err != nil {
		return Span{}, fmt.Errorf("audit span: %w", wrapUnavailable(err))
	}
	sp := Span{First: first.Int64, Last: last.Int64}
	if oldest.Valid {
		sp.Oldest = time.Unix(0, oldest.Int64)
	}
	return sp, nil
}
