// Package auditexport sends the proxy's audit trail to a SIEM as the API
// server's own audit.k8s.io/v1 Events (DESIGN.md §8): JSON lines to a file
// (--audit-export-file) and EventList batches to a webhook configured by a
// kubeconfig-format file (--audit-webhook-config), as kube-apiserver's
// --audit-log-path and --audit-webhook-config-file do. Retention
// (--audit-retention) lives here too, since it must not delete what an
// export has not delivered.
//
// Delivery is at least once, in store order, from a durable cursor: an
// Exporter reads a bounded batch of the events after its cursor, maps
// them (mapping.go), hands them to its Sink until the Sink accepts them,
// and only then moves and persists the cursor. A receiver that is down or
// refuses a batch (any non-2xx answer, 4xx included) stops the export at
// that batch, with a log line per attempt and a growing backoff; nothing
// is ever skipped, and nothing but the one batch is held in memory.
package auditexport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/limenhq/limen/gateway/audit"
)

// Source is the audit store as the export reads it (audit.Store).
type Source interface {
	EventsAfter(ctx context.Context, afterSeq int64, limit int) ([]audit.Event, error)
	Span(ctx context.Context) (audit.Span, error)
}

// Sink is a receiver of exported events.
type Sink interface {
	// Name names the sink in logs, metrics and its cursor file's name.
	Name() string
	// Deliver returns nil only once the receiver has accepted the whole
	// batch; a batch that fails is delivered again, whole.
	Deliver(ctx context.Context, batch []auditv1.Event) error
}

// Defaults of Options.
const (
	DefaultBatchSize  = 256
	DefaultPoll       = time.Second
	DefaultMinBackoff = time.Second
	DefaultMaxBackoff = time.Minute
)

// Options tunes an Exporter; zero fields take the defaults.
type Options struct {
	// DataDir is the proxy's data directory, where the cursor is kept
	// (CursorPath) unless Cursors is set.
	DataDir string
	// Cursors keeps the cursor; nil is FileCursors in DataDir.
	Cursors Cursors
	// BatchSize is the most events read, held and delivered at once.
	BatchSize int
	// Poll is how often an export that has delivered everything looks for
	// new events.
	Poll time.Duration
	// MinBackoff and MaxBackoff bound the wait before a failed batch is
	// tried again; it doubles from the one to the other.
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger
}

// Exporter delivers the audit trail to one Sink.
type Exporter struct {
	src     Source
	sink    Sink
	cursors Cursors
	opts    Options
	log     *slog.Logger

	delivered atomic.Int64 // the cursor: last sequence number accepted
	failures  atomic.Int64 // failed deliveries since start
}

// New builds the export of src to sink and reads its cursor.
func New(src Source, sink Sink, opts Options) (*Exporter, error) {
	if opts.Cursors == nil {
		if opts.DataDir == "" {
			return nil, errors.New("audit export: DataDir or Cursors is required (the cursor lives there)")
		}
		opts.Cursors = FileCursors{DataDir: opts.DataDir}
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.Poll <= 0 {
		opts.Poll = DefaultPoll
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(DefaultMaxBackoff, opts.MinBackoff)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	x := &Exporter{src: src, sink: sink, cursors: opts.Cursors, opts: opts,
		log: opts.Logger.With("component", "audit-export", "sink", sink.Name())}
	if err := x.load(context.Background()); err != nil {
		return nil, err
	}
	return x, nil
}

// load reads the cursor; Run reads it again, since with shared cursors
// another proxy may have exported since.
func (x *Exporter) load(ctx context.Context) error {
	seq, err := x.cursors.Read(ctx, x.sink.Name())
	if err != nil {
		return err
	}
	x.delivered.Store(max(seq, x.delivered.Load()))
	return nil
}

// Name is the sink's name.
func (x *Exporter) Name() string { return x.sink.Name() }

// Delivered is the sequence number of the last event the receiver
// accepted (the cursor); retention deletes nothing after it.
func (x *Exporter) Delivered() int64 { return x.delivered.Load() }

// Failures is the number of failed deliveries since start.
func (x *Exporter) Failures() int64 { return x.failures.Load() }

// Run delivers until ctx ends.
func (x *Exporter) Run(ctx context.Context) {
	for ctx.Err() == nil {
		err := x.load(ctx)
		if err == nil {
			break
		}
		x.log.Error("audit export: cannot read the cursor; retrying", "err", err)
		sleep(ctx, x.opts.MinBackoff)
	}
	x.log.Info("audit export started", "after_seq", x.Delivered())
	backoff := x.opts.MinBackoff
	for ctx.Err() == nil {
		n, err := x.step(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			x.log.Error("audit export: cannot read the audit store; retrying", "err", err, "retry_in", backoff)
			backoff = x.sleep(ctx, backoff)
		case n == 0:
			backoff = x.opts.MinBackoff
			sleep(ctx, x.opts.Poll)
		default:
			backoff = x.opts.MinBackoff
		}
	}
}

// step delivers the next batch, retrying it until it is accepted or ctx
// ends, and returns how many events it delivered.
func (x *Exporter) step(ctx context.Context) (int, error) {
	after := x.Delivered()
	evs, err := x.src.EventsAfter(ctx, after, x.opts.BatchSize)
	if err != nil || len(evs) == 0 {
		return 0, err
	}
	if first := evs[0].ID; first != after+1 && after > 0 {
		// Only a deletion outside Limen's retention (which never deletes
		// past the cursor) makes a hole: say so, since the receiver will
		// never see those events.
		x.log.Error("audit export: events were deleted before they were delivered", "missing_from", after+1, "missing_to", first-1)
	}
	batch := make([]auditv1.Event, len(evs))
	for i, e := range evs {
		batch[i] = Map(e)
	}
	first, last := evs[0].ID, evs[len(evs)-1].ID
	backoff := x.opts.MinBackoff
	for attempt := 1; ; attempt++ {
		err := x.sink.Deliver(ctx, batch)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return 0, nil
		}
		x.failures.Add(1)
		msg := "audit export: delivery failed; retrying the same batch"
		var se *StatusError
		if errors.As(err, &se) && se.Code/100 == 4 {
			msg = "audit export: the receiver refused the batch; retrying it, the export goes no further until it is accepted (check the receiver and audit-webhook-config)"
		}
		x.log.Error(msg, "first_seq", first, "last_seq", last, "attempt", attempt, "err", err, "retry_in", backoff)
		backoff = x.sleep(ctx, backoff)
		if ctx.Err() != nil {
			return 0, nil
		}
	}
	x.delivered.Store(last)
	if err := x.cursors.Write(ctx, x.sink.Name(), last); err != nil {
		// Delivered all the same: a restart before the next good write
		// delivers these again, which at least once allows.
		x.log.Error("audit export: cursor not saved; a restart will deliver again", "err", err)
	}
	return len(evs), nil
}

// sleep waits d, with up to a fifth more of jitter, and returns the next
// backoff.
func (x *Exporter) sleep(ctx context.Context, d time.Duration) time.Duration {
	sleep(ctx, d+rand.N(d/5+1))
	return min(2*d, x.opts.MaxBackoff)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Lag is how far an export is behind the store.
type Lag struct {
	// Events is the number of events stored after the cursor (the ids are
	// consecutive, so this is the difference of the two).
	Events int64
	// Oldest is the time of the first event not yet delivered; zero when
	// none waits.
	Oldest time.Time
}

// LagOf measures the lag of an export whose cursor is delivered.
func LagOf(ctx context.Context, src Source, delivered int64) (Lag, error) {
	sp, err := src.Span(ctx)
	if err != nil {
		return Lag{}, err
	}
	if sp.Last <= delivered {
		return Lag{}, nil
	}
	next, err := src.EventsAfter(ctx, delivered, 1)
	if err != nil {
		return Lag{}, err
	}
	l := Lag{Events: sp.Last - max(delivered, sp.First-1)}
	if len(next) > 0 {
		l.Oldest = next[0].Time
	}
	return l, nil
}

// Lag measures x's lag.
func (x *Exporter) Lag(ctx context.Context) (Lag, error) {
	l, err := LagOf(ctx, x.src, x.Delivered())
	if err != nil {
		return l, fmt.Errorf("audit export lag: %w", err)
	}
	return l, nil
}
