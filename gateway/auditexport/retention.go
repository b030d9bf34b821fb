package auditexport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/limenhq/limen/gateway/audit"
)

// MinRetention is the shortest --audit-retention accepted: a session's
// session.start must outlive the session (the proxy looks it up when the
// worker reports the end), and an export must have time to catch up.
const MinRetention = time.Hour

// DefaultRetentionBatch is how many events one delete removes at most.
const DefaultRetentionBatch = 1000

// Pruner is the audit store as retention uses it (audit.Store).
type Pruner interface {
	DeleteBefore(ctx context.Context, t time.Time, throughSeq int64, limit int) (int, error)
	Span(ctx context.Context) (audit.Span, error)
}

// Retention deletes events older than Keep, in batches, and records each
// run that deleted or held back anything as one audit.retention event. It
// never deletes an event an Exporter has not delivered: while a receiver
// is down, old events stay (and the audit database may fill up, which
// refuses requests: fail closed) until it has them.
type Retention struct {
	Store Pruner
	Audit audit.Sink
	// Keep is how long events are kept; 0 keeps them forever.
	Keep time.Duration
	// Exports bound what may be deleted (their cursors).
	Exports []*Exporter
	// Interval is the time between runs; 0 is Keep/24, within [1m, 1h].
	Interval time.Duration
	// Batch is the most events one delete removes; 0 is
	// DefaultRetentionBatch.
	Batch  int
	Logger *slog.Logger
	Now    func() time.Time
}

// Result is what one run did.
type Result struct {
	Before  time.Time // events before this were due for deletion
	Deleted int
	// Through is the last sequence number the run could delete (the
	// slowest export's cursor); math.MaxInt64 when no export bounds it.
	Through int64
	// HeldBack: events older than Before remain because an export has not
	// delivered them.
	HeldBack bool
	// Oldest is the oldest event kept after the run; zero when none.
	Oldest time.Time
}

// RunOnce deletes what is due now and records the run.
func (r *Retention) RunOnce(ctx context.Context) (Result, error) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	batch := r.Batch
	if batch <= 0 {
		batch = DefaultRetentionBatch
	}
	res := Result{Before: now().Add(-r.Keep), Through: math.MaxInt64}
	for _, x := range r.Exports {
		res.Through = min(res.Through, x.Delivered())
	}
	for ctx.Err() == nil {
		n, err := r.Store.DeleteBefore(ctx, res.Before, res.Through, batch)
		res.Deleted += n
		if err != nil {
			return res, r.record(ctx, now(), res, err)
		}
		if n < batch {
			break
		}
	}
	sp, err := r.Store.Span(ctx)
	if err != nil {
		return res, r.record(ctx, now(), res, err)
	}
	res.Oldest = sp.Oldest
	res.HeldBack = !sp.Oldest.IsZero() && sp.Oldest.Before(res.Before)
	return res, r.record(ctx, now(), res, nil)
}

// record stores the run's audit.retention event, when it did or held
// back anything, or failed.
func (r *Retention) record(ctx context.Context, at time.Time, res Result, runErr error) error {
	if res.Deleted == 0 && !res.HeldBack && runErr == nil {
		return nil
	}
	f := map[string]string{
		"deleted":   strconv.Itoa(res.Deleted),
		"before":    res.Before.UTC().Format(time.RFC3339),
		"retention": r.Keep.String(),
	}
	if res.HeldBack {
		f["held_back"] = "true"
		f["through_seq"] = strconv.FormatInt(res.Through, 10)
	}
	if runErr != nil {
		f["error"] = runErr.Error()
	}
	err := r.Audit.Emit(ctx, audit.Event{Type: audit.TypeAuditRetention, Time: at, Fields: f})
	if err != nil {
		err = fmt.Errorf("audit retention: record the run: %w", err)
	}
	return errors.Join(runErr, err)
}

// Run runs retention every Interval (the first run at once) until ctx
// ends. It does nothing when Keep is 0.
func (r *Retention) Run(ctx context.Context) {
	if r.Keep <= 0 {
		return
	}
	log := r.Logger
	if log == nil {
		log = slog.Default()
	}
	every := r.Interval
	if every <= 0 {
		every = min(max(r.Keep/24, time.Minute), time.Hour)
	}
	for {
		res, err := r.RunOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Error("audit retention run failed; trying again later", "deleted", res.Deleted, "err", err, "next_in", every)
		case res.HeldBack:
			log.Warn("audit retention: old events kept until the export delivers them", "deleted", res.Deleted,
				"through_seq", res.Through, "oldest", res.Oldest)
		case res.Deleted > 0:
			log.Info("audit retention", "deleted", res.Deleted, "before", res.Before)
		}
		sleep(ctx, every)
		if ctx.Err() != nil {
			return
		}
	}
}
