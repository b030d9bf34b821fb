package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limenhq/limen/gateway/bytesize"
	"github.com/limenhq/limen/gateway/store"
	"github.com/limenhq/limen/gateway/store/sqlite"
)

// FileName is the audit database's name inside the proxy's data directory.
const FileName = sqlite.AuditFile

// Path is the audit database's path in the proxy's data directory.
func Path(dataDir string) string { return filepath.Join(dataDir, FileName) }

// DefaultMaxBatch is how many events one transaction commits at most.
const DefaultMaxBatch = 512

// DefaultMaxBytes is the audit database's size limit when Options.MaxBytes
// is zero: some ten million requests' events.
const DefaultMaxBytes int64 = 10 << 30

// MinMaxBytes is the smallest size limit accepted: the empty schema and a
// few thousand events.
const MinMaxBytes int64 = 1 << 20

// Options tunes a Store. The zero value is a writable store.
type Options struct {
	// ReadOnly opens an existing store for Search only (limen audit search);
	// Emit then returns ErrUnavailable.
	ReadOnly bool
	// MaxBatch caps the events committed in one transaction; 0 means
	// DefaultMaxBatch.
	MaxBatch int
	// MaxBytes limits the data the database holds (its pages in use, so
	// that deleting old events makes room); 0 means DefaultMaxBytes. Events
	// that would take it past the limit are refused with a *FullError, and
	// the requests they describe with them (fail closed).
	MaxBytes int64
	// Linger is how long the batcher holds events nobody waits for
	// (Append: a request's outcome) for an event somebody waits for to
	// share their commit; 0 means DefaultLinger, a negative value none.
	Linger time.Duration
	// Logger receives commit failures; nil means slog.Default().
	Logger *slog.Logger
	// OnCommit, if set, is told how long each successful commit took, on
	// the batcher's goroutine (metrics); keep it short.
	OnCommit func(time.Duration)
}

// DefaultLinger is Options.Linger's default: at most this long, an
// appended outcome waits for the next request's record to share its fsync.
const DefaultLinger = 5 * time.Millisecond

// Store is the proxy's audit trail, through a store.Audit driver (an
// SQLite file with WAL and synchronous=FULL, or the shared PostgreSQL
// database). Events are group-committed: one goroutine owned by the Store takes every event
// waiting at that moment, writes them in one transaction and answers each
// caller after the commit's fsync. Concurrent callers therefore share
// fsyncs instead of queueing behind one each. Submit queues an event without
// waiting, so that a caller can do other work (forward a request) while the
// commit is under way; Emit waits.
type Store struct {
	db       store.Audit
	log      *slog.Logger
	maxBatch int
	maxBytes int64
	readOnly bool
	// used is the bytes held by the database's pages in use, as last
	// measured (every measureEvery commits, after each one near the limit,
	// and whenever it looked full), plus what fit reckons of the events
	// committed since.
	used atomic.Int64

	// waiting is the queue the batcher takes from, in order: a slice
	// under a mutex, so that Submit never waits for a commit under way.
	mu      sync.Mutex
	waiting []*pending
	waiters int // the waiting events somebody waits for (not lazy)
	closed  bool
	linger  time.Duration
	wake    chan struct{} // one slot: "waiting is not empty"
	quit    chan struct{}
	stopped chan struct{}
	once    sync.Once

	onCommit     func(time.Duration)
	sinceMeasure int          // commits since used was last measured; the batcher's
	commits      atomic.Int64 // transactions committed, for tests and metrics
	events       atomic.Int64 // events committed, for tests and metrics
}

var _ Submitter = (*Store)(nil)

// pending is one queued event, or a Flush marker (flush set, no event).
type pending struct {
	e     Event
	data  []byte
	flush bool
	lazy  bool       // Append: nobody waits for it
	done  chan error // one slot: the batcher never waits on a caller
}

// Open opens (creating if needed, unless opts.ReadOnly) the SQLite store
// at path, usually Path(dataDir). Close it to stop its batcher.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	db, err := sqlite.OpenAudit(ctx, path, opts.ReadOnly)
	if err != nil {
		return nil, err
	}
	s, err := New(ctx, db, opts)
	if err != nil {
		db.Close()
	}
	return s, err
}

// New builds the store over db and starts its batcher (unless
// opts.ReadOnly); Close stops it and closes db.
func New(ctx context.Context, db store.Audit, opts Options) (*Store, error) {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = DefaultMaxBatch
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Linger == 0 {
		opts.Linger = DefaultLinger
	}
	s := &Store{
		db:       db,
		log:      opts.Logger,
		maxBatch: opts.MaxBatch,
		maxBytes: opts.MaxBytes,
		readOnly: opts.ReadOnly,
		linger:   max(opts.Linger, 0),
		onCommit: opts.OnCommit,
		wake:     make(chan struct{}, 1),
		quit:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	if _, err := s.measure(ctx); err != nil {
		return nil, fmt.Errorf("open audit store %s: %w", db.Location(), err)
	}
	if opts.ReadOnly {
		close(s.stopped)
	} else {
		go s.run()
	}
	return s, nil
}

// Close commits the events queued so far, stops the batcher and closes the
// database; events submitted after are refused (ErrUnavailable).
func (s *Store) Close() error {
	s.once.Do(func() { close(s.quit) })
	<-s.stopped
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close audit store: %w", err)
	}
	return nil
}

// Emit records e and returns once the transaction holding it has committed.
// Errors wrap ErrInvalid (e is malformed) or ErrUnavailable (not recorded,
// or not known to be); a cancelled ctx while waiting is ErrUnavailable too,
// since the caller cannot know whether the event was kept.
func (s *Store) Emit(ctx context.Context, e Event) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("audit emit: %w: %w", ErrUnavailable, err)
	}
	return s.Submit(e).Wait(ctx)
}

// Submit queues e for the next group commit and returns at once; the
// Commit's Wait says when it is durable, or why it is not. A caller that
// never waits still has its event committed (or refused, and logged), in
// the order submitted: an event submitted before another is never
// committed after it.
func (s *Store) Submit(e Event) Commit {
	// ID and the outcome flags are the store's answers to Search, never
	// part of what is stored.
	e.ID, e.OutcomeUnknown, e.PossiblyApplied = 0, false, false
	data, err := EncodeEvent(e)
	if err != nil {
		return failed(err)
	}
	if s.readOnly {
		return failed(fmt.Errorf("audit emit: store opened read-only: %w", ErrUnavailable))
	}
	p := &pending{e: e, data: data, done: make(chan error, 1)}
	if err := s.enqueue(p); err != nil {
		return failed(err)
	}
	return Commit{done: p.done}
}

// Append queues e like Submit, for a caller that will not wait: the
// batcher holds it up to Options.Linger for an event somebody waits for,
// so that the two share a commit (a request's outcome, and the next
// request's record). An event that cannot be stored is logged.
func (s *Store) Append(e Event) {
	e.ID, e.OutcomeUnknown, e.PossiblyApplied = 0, false, false
	data, err := EncodeEvent(e)
	if err == nil {
		err = s.enqueue(&pending{e: e, data: data, lazy: true, done: make(chan error, 1)})
	}
	if err != nil {
		s.log.Error("audit event not stored", "type", e.Type, "session", e.SessionID, "err", err)
	}
}

// Flush returns once every event submitted before it was committed or
// refused: a barrier for a caller that submitted without waiting (tests,
// shutdown).
func (s *Store) Flush(ctx context.Context) error {
	p := &pending{flush: true, done: make(chan error, 1)}
	if err := s.enqueue(p); err != nil {
		return err
	}
	return Commit{done: p.done}.Wait(ctx)
}

func (s *Store) enqueue(p *pending) error {
	s.mu.Lock()
	if s.closed || s.readOnly {
		s.mu.Unlock()
		return errClosed
	}
	s.waiting = append(s.waiting, p)
	if !p.lazy {
		s.waiters++
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default: // the batcher is already woken
	}
	return nil
}

var errClosed = fmt.Errorf("audit emit: store closed: %w", ErrUnavailable)

// Commit is an event queued by Submit.
type Commit struct{ done <-chan error }

// Wait returns nil once the event is durable. Its errors are Emit's; a ctx
// that ends first is ErrUnavailable, though the event may still be
// committed.
func (c Commit) Wait(ctx context.Context) error {
	select {
	case err := <-c.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("audit emit: waiting for commit: %w: %w", ErrUnavailable, ctx.Err())
	}
}

func failed(err error) Commit {
	done := make(chan error, 1)
	done <- err
	return Commit{done: done}
}

// Submitter is a Sink that can queue an event without waiting for its
// commit (Store, and an Aggregator in front of one).
type Submitter interface {
	Sink
	Submit(e Event) Commit
	Append(e Event)
}

// Append queues e on sink for nobody to wait for: with its Append when it
// has one, else by an Emit of its own goroutine, whose failure is lost (the
// sink is expected to log it).
func Append(ctx context.Context, sink Sink, e Event) {
	if s, ok := sink.(Submitter); ok {
		s.Append(e)
		return
	}
	Submit(ctx, sink, e)
}

// Submit queues e on sink: with its Submit when it has one, else by an
// Emit of its own goroutine.
func Submit(ctx context.Context, sink Sink, e Event) Commit {
	if s, ok := sink.(Submitter); ok {
		return s.Submit(e)
	}
	done := make(chan error, 1)
	go func() { done <- sink.Emit(ctx, e) }()
	return Commit{done: done}
}

// run is the batcher: it owns all writes. It takes every event queued at
// that moment and commits them in one transaction; when nobody waits for
// any of them (appended outcomes), it first lingers for one somebody waits
// for, up to s.linger.
func (s *Store) run() {
	defer close(s.stopped)
	var batch, events []*pending
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		select {
		case <-s.quit:
			s.drain(batch, events)
			return
		case <-s.wake:
		}
		lingered := false
		for {
			select {
			case <-s.quit:
				s.drain(batch, events)
				return
			default:
			}
			s.mu.Lock()
			if len(s.waiting) == 0 {
				s.mu.Unlock()
				break
			}
			if s.waiters == 0 && !lingered && s.linger > 0 {
				// A wake-up already counted is dropped under the lock:
				// any later Submit sends its own.
				select {
				case <-s.wake:
				default:
				}
				s.mu.Unlock()
				lingered = true
				linger.Reset(s.linger)
				select {
				case <-s.wake:
				case <-linger.C:
				case <-s.quit:
				}
				linger.Stop()
				continue
			}
			batch = s.take(batch)
			s.mu.Unlock()
			lingered = false
			events = s.writeBatch(batch, events)
		}
	}
}

// Waiting is the number of events queued and not yet committed (metrics).
func (s *Store) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting)
}

// take moves up to maxBatch waiting events to batch; s.mu is held.
func (s *Store) take(batch []*pending) []*pending {
	if len(s.waiting) <= s.maxBatch {
		batch, s.waiting = s.waiting, batch[:0]
	} else {
		batch = append(batch[:0], s.waiting[:s.maxBatch]...)
		s.waiting = s.waiting[:copy(s.waiting, s.waiting[s.maxBatch:])]
	}
	for _, p := range batch {
		if !p.lazy {
			s.waiters--
		}
	}
	return batch
}

// writeBatch commits the events of batch and answers its Flush markers
// after them; events is scratch space, returned for reuse.
func (s *Store) writeBatch(batch, events []*pending) []*pending {
	events = events[:0]
	for _, p := range batch {
		if !p.flush {
			events = append(events, p)
		}
	}
	s.write(events)
	for _, p := range batch {
		if p.flush {
			p.done <- nil
		}
	}
	clear(batch)
	clear(events)
	return events
}

// drain commits every event queued when Close was called and refuses
// those submitted after.
func (s *Store) drain(batch, events []*pending) {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	for {
		s.mu.Lock()
		if len(s.waiting) == 0 {
			s.mu.Unlock()
			return
		}
		batch = s.take(batch)
		s.mu.Unlock()
		events = s.writeBatch(batch, events)
	}
}

// write commits the events that fit under the size limit in one
// transaction and answers each.
func (s *Store) write(batch []*pending) {
	if len(batch) == 0 {
		return
	}
	fits := s.fit(batch)
	for _, p := range batch[fits:] {
		p.done <- s.full()
	}
	if fits == 0 {
		return
	}
	start := time.Now()
	err := s.commit(batch[:fits])
	if err == nil {
		if s.onCommit != nil {
			s.onCommit(time.Since(start))
		}
		s.commits.Add(1)
		s.events.Add(int64(fits))
	} else {
		s.log.Error("audit commit failed; events refused", "events", fits, "err", err)
		err = fmt.Errorf("audit emit: commit: %w: %w", ErrUnavailable, err)
	}
	for _, p := range batch[:fits] {
		p.done <- err
	}
	// The size is measured after the callers are answered, and only now
	// and then while far from the limit (a tenth of the append path's CPU
	// when measured at every commit); in between, each event counts as
	// fit reckons it.
	if err == nil {
		s.sinceMeasure++
		if s.used.Add(s.estimate(batch[:fits])) < s.maxBytes-s.maxBytes/16 && s.sinceMeasure < measureEvery {
			return
		}
	}
	s.sinceMeasure = 0
	if _, merr := s.measure(context.Background()); merr != nil {
		s.log.Error("audit database size unknown", "err", merr)
	}
}

// measureEvery is how many commits far from the size limit go between
// measurements.
const measureEvery = 64

// estimate is what fit reckons a batch's events add to the database.
func (s *Store) estimate(batch []*pending) int64 {
	var n int64
	for _, p := range batch {
		n += int64(len(p.data)) + rowOverhead
	}
	return n
}

func (s *Store) commit(batch []*pending) error {
	// Not tied to any caller's context: a cancelled request must not abort
	// the other events sharing the transaction.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows := make([]store.AuditRecord, len(batch))
	for i, p := range batch {
		rows[i] = record(p.e, p.data)
	}
	return s.db.Append(ctx, rows)
}

// record is the row of e, whose JSON is data.
func record(e Event, data []byte) store.AuditRecord {
	r := store.AuditRecord{TimeNS: e.Time.UnixNano(), Type: string(e.Type), Name: e.Principal.Name,
		Cluster: e.Cluster, SessionID: e.SessionID, Data: data}
	if e.Principal.Name != "" {
		r.Who = e.Principal.String()
	}
	if e.Kube != nil {
		r.Verb = e.Kube.Verb
	}
	if e.Type == TypeAuthDenied && e.Denied != nil {
		r.Action = e.Denied.Action
	}
	return r
}

// ErrFull means the audit database reached its size limit: its events, and
// the requests they describe, are refused until an operator makes room.
// Errors of this kind are *FullError; they wrap ErrUnavailable too, so every
// caller that fails closed on an unavailable audit trail does so here.
var ErrFull = errors.New("audit database full")

// FullError is the refusal of an event by a full audit database.
type FullError struct {
	Path      string
	Used, Max int64
}

func (e *FullError) Error() string {
	return fmt.Sprintf("the audit database %s is full: %s in use of its %s limit (audit-max-bytes); "+
		"delete or archive old events, or raise audit-max-bytes", e.Path, bytesize.Approx(e.Used), bytesize.Format(e.Max))
}

// Is makes errors.Is hold for ErrFull and ErrUnavailable.
func (e *FullError) Is(target error) bool { return target == ErrFull || target == ErrUnavailable }

func (s *Store) full() error {
	return &FullError{Path: s.db.Location(), Used: s.used.Load(), Max: s.maxBytes}
}

// rowOverhead is what an event costs the database beyond its JSON: the
// other columns and the four index entries.
const rowOverhead = 256

// fit returns how many events at the head of batch fit under the limit, by
// their encoded size plus rowOverhead. When the batch does not fit whole,
// use is measured again first: an operator may have deleted events.
func (s *Store) fit(batch []*pending) int {
	need := func(used int64) int {
		for i, p := range batch {
			used += int64(len(p.data)) + rowOverhead
			if used > s.maxBytes {
				return i
			}
		}
		return len(batch)
	}
	if n := need(s.used.Load()); n == len(batch) {
		return n
	}
	used, err := s.measure(context.Background())
	if err != nil {
		s.log.Error("audit database size unknown; events refused", "err", err)
		return 0
	}
	n := need(used)
	if n < len(batch) {
		s.log.Error("audit database full; events refused", "events", len(batch)-n, "path", s.db.Location(),
			"used", used, "limit", s.maxBytes)
	}
	return n
}

// measure reads the bytes the trail holds (in SQLite its pages in use:
// free pages are reused before the file grows) and remembers them.
func (s *Store) measure(ctx context.Context) (int64, error) {
	used, err := s.db.Used(ctx)
	if err != nil {
		return 0, fmt.Errorf("measure audit database: %w", wrapUnavailable(err))
	}
	s.used.Store(used)
	return used, nil
}

// Room returns a *FullError when the database has reached its limit, so
// that the proxy refuses a request before it forwards anything; nil
// otherwise. A database that looked full is measured again, so that events
// deleted meanwhile make room at once.
func (s *Store) Room(ctx context.Context) error {
	if s.used.Load() < s.maxBytes {
		return nil
	}
	used, err := s.measure(ctx)
	if err != nil {
		return err
	}
	if used < s.maxBytes {
		return nil
	}
	return s.full()
}

// Usage is how much of its limit the audit database uses.
type Usage struct {
	// Used is the bytes its pages in use hold; File the size of the
	// database file (PostgreSQL: the database), free pages included.
	Used, File, Max int64
	Events          int64
}

// Usage measures the database: the bytes in use against the limit, the
// file's size and the number of events.
func (s *Store) Usage(ctx context.Context) (Usage, error) {
	used, err := s.measure(ctx)
	if err != nil {
		return Usage{}, err
	}
	u := Usage{Used: used, Max: s.maxBytes}
	if n, err := s.db.Size(ctx); err == nil {
		u.File = n
	}
	if u.Events, err = s.db.Count(ctx); err != nil {
		return u, fmt.Errorf("count audit events: %w", wrapUnavailable(err))
	}
	return u, nil
}
