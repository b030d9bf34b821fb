package recstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/limenhq/limen/gateway/audit"
)

// TypeRetention is the audit event of one retention run: how many
// recordings it deleted and kept, and the oldest kept. Its Fields are
// deleted, deleted_bytes, failed, kept, cutoff and oldest_kept (RFC 3339,
// empty when none is kept).
const TypeRetention audit.Type = "recording.retention"

// DefaultRetentionBatch is how many recordings one batch deletes.
const DefaultRetentionBatch = 500

// RetentionResult is what one retention run did.
type RetentionResult struct {
	Deleted, Failed, Kept int
	DeletedBytes          int64
	Cutoff                time.Time
	// OldestKept is the time of the oldest recording left (zero if none).
	OldestKept time.Time
}

// DeleteOlderThan deletes the recordings stored before cutoff, oldest
// first, batch at a time (a listing of the store between batches), until
// none is left or ctx ends. A recording that cannot be deleted is counted in
// Failed and left for the next run.
func (s *Store) DeleteOlderThan(ctx context.Context, cutoff time.Time, batch int) (RetentionResult, error) {
	if batch <= 0 {
		batch = DefaultRetentionBatch
	}
	res := RetentionResult{Cutoff: cutoff}
	failed := map[string]bool{}
	for {
		all, err := s.List()
		if err != nil {
			return res, err
		}
		var old []Info
		res.Kept, res.OldestKept = 0, time.Time{}
		for _, info := range all {
			switch {
			case failed[info.Cluster+"/"+info.ID]:
				res.Kept++
			case info.Time.Before(cutoff) && len(old) < batch:
				old = append(old, info)
				continue
			case info.Time.Before(cutoff):
				continue // a later batch
			default:
				res.Kept++
			}
			if res.OldestKept.IsZero() || info.Time.Before(res.OldestKept) {
				res.OldestKept = info.Time
			}
		}
		if len(old) == 0 {
			return res, nil
		}
		for _, info := range old {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			if err := s.delete(ctx, info); err != nil {
				res.Failed++
				failed[info.Cluster+"/"+info.ID] = true
				continue
			}
			res.Deleted++
			res.DeletedBytes += info.Size
		}
	}
}

// delete removes one stored recording.
func (s *Store) delete(ctx context.Context, info Info) error {
	if s.bucket != nil {
		return s.bucket.delete(ctx, info)
	}
	cast, err := s.paths(info.Cluster, info.ID)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The checksum goes last: a recording without it is not listed, and
	// one without its cast file is not stored (readSum).
	var gone int64
	for _, name := range []string{cast, cast + extSum} {
		size := fileSize(name)
		if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("recording store: %w", err)
		}
		gone += size
	}
	s.used -= gone
	return nil
}

// Oldest is the oldest stored recording; false when there is none.
func (s *Store) Oldest() (Info, bool, error) {
	all, err := s.List()
	if err != nil || len(all) == 0 {
		return Info{}, false, err
	}
	return all[0], true, nil
}

// Retention deletes recordings older than Keep, a run at start and then
// every Every, each run audited as one TypeRetention event with its counts.
type Retention struct {
	Store *Store
	// Keep is how long a recording is kept (above 0).
	Keep time.Duration
	// Every is the time between runs (0: an hour, or Keep/10 if shorter).
	Every time.Duration
	// Batch is how many recordings a batch deletes (0: DefaultRetentionBatch).
	Batch  int
	Audit  audit.Sink
	Logger *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Run runs retention until ctx ends.
func (r *Retention) Run(ctx context.Context) {
	every := r.Every
	if every <= 0 {
		every = min(time.Hour, max(r.Keep/10, time.Second))
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.Logger.Warn("recording retention failed; will retry", "err", err, "retry_in", every)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// RunOnce deletes what is older than Keep and audits the run. The event is
// emitted whenever something was deleted or failed, and for a run that
// found nothing to do, too: the trail shows that retention ran.
func (r *Retention) RunOnce(ctx context.Context) (RetentionResult, error) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	start := now()
	res, err := r.Store.DeleteOlderThan(ctx, start.Add(-r.Keep), r.Batch)
	oldest := ""
	if !res.OldestKept.IsZero() {
		oldest = res.OldestKept.UTC().Format(time.RFC3339)
	}
	ev := audit.Event{Type: TypeRetention, Time: now(), Fields: map[string]string{
		"store": r.Store.Location(), "keep": r.Keep.String(), "cutoff": res.Cutoff.UTC().Format(time.RFC3339),
		"deleted": strconv.Itoa(res.Deleted), "deleted_bytes": strconv.FormatInt(res.DeletedBytes, 10),
		"failed": strconv.Itoa(res.Failed), "kept": strconv.Itoa(res.Kept), "oldest_kept": oldest,
	}}
	if err != nil {
		ev.Fields["error"] = oneLine(err)
	}
	if aerr := r.Audit.Emit(ctx, ev); aerr != nil {
		err = errors.Join(err, fmt.Errorf("audit the recording retention run: %w", aerr))
	}
	if res.Deleted > 0 || res.Failed > 0 {
		r.Logger.Info("recording retention", "deleted", res.Deleted, "deleted_bytes", res.DeletedBytes,
			"failed", res.Failed, "kept", res.Kept, "oldest_kept", oldest)
	}
	return res, err
}
