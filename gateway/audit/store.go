package audit

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// FileName is the audit database's name inside the proxy's data directory.
const FileName = "audit.db"

// Path is the audit database's path in the proxy's data directory.
func Path(dataDir string) string { return filepath.Join(dataDir, FileName) }

// DefaultMaxBatch is how many events one transaction commits at most.
const DefaultMaxBatch = 512

const schema = `
CREATE TABLE IF NOT EXISTS events (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	time_ns    INTEGER NOT NULL,
	type       TEXT    NOT NULL,
	who        TEXT    NOT NULL,
	name       TEXT    NOT NULL,
	cluster    TEXT    NOT NULL,
	verb       TEXT    NOT NULL,
	session_id TEXT    NOT NULL,
	data       TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS events_time    ON events (time_ns);
CREATE INDEX IF NOT EXISTS events_name    ON events (name, time_ns);
CREATE INDEX IF NOT EXISTS events_cluster ON events (cluster, time_ns);
CREATE INDEX IF NOT EXISTS events_session ON events (session_id) WHERE session_id != '';
`

// Options tunes a Store. The zero value is a writable store.
type Options struct {
	// ReadOnly opens an existing store for Search only (limen audit search);
	// Emit then returns ErrUnavailable.
	ReadOnly bool
	// MaxBatch caps the events committed in one transaction; 0 means
	// DefaultMaxBatch.
	MaxBatch int
	// Logger receives commit failures; nil means slog.Default().
	Logger *slog.Logger
}

// Store is the proxy's SQLite audit store (WAL, synchronous=FULL). Emit
// calls are group-committed: one goroutine owned by the Store takes every
// event waiting at that moment, writes them in one transaction and answers
// each caller after the commit's fsync. Concurrent callers therefore share
// fsyncs instead of queueing behind one each.
type Store struct {
	db       *sql.DB
	log      *slog.Logger
	maxBatch int
	readOnly bool

	queue   chan *pending // unbuffered: a send succeeds only while run is alive
	quit    chan struct{}
	stopped chan struct{}
	once    sync.Once

	commits atomic.Int64 // transactions committed, for tests and metrics
}

var _ Sink = (*Store)(nil)

type pending struct {
	e    Event
	data []byte
	done chan error
}

// Open opens (creating if needed, unless opts.ReadOnly) the store at path,
// usually Path(dataDir). Close it to stop its batcher.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = DefaultMaxBatch
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ReadOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("open audit store %s: %w", path, err)
		}
	}
	db, err := sql.Open("sqlite", dsn(path, opts.ReadOnly))
	if err != nil {
		return nil, fmt.Errorf("open audit store %s: %w", path, err)
	}
	if !opts.ReadOnly {
		if _, err := db.ExecContext(ctx, schema); err != nil {
			db.Close()
			return nil, fmt.Errorf("open audit store %s: create schema: %w", path, err)
		}
	} else if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open audit store %s: %w", path, err)
	}
	s := &Store{
		db:       db,
		log:      opts.Logger,
		maxBatch: opts.MaxBatch,
		readOnly: opts.ReadOnly,
		queue:    make(chan *pending),
		quit:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	if opts.ReadOnly {
		close(s.stopped)
	} else {
		go s.run()
	}
	return s, nil
}

func dsn(path string, readOnly bool) string {
	// SQLite URI: escape the characters that would end the path.
	p := strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(path)
	if readOnly {
		return "file:" + p + "?mode=ro&_pragma=busy_timeout(5000)&_pragma=query_only(1)"
	}
	// synchronous=FULL: in WAL mode NORMAL does not fsync at commit, and an
	// event must survive a power cut once Emit has returned.
	return "file:" + p + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate"
}

// Close stops the batcher (events still waiting get ErrUnavailable) and
// closes the database.
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
	data, err := EncodeEvent(e)
	if err != nil {
		return err
	}
	if s.readOnly {
		return fmt.Errorf("audit emit: store opened read-only: %w", ErrUnavailable)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("audit emit: %w: %w", ErrUnavailable, err)
	}
	p := &pending{e: e, data: data, done: make(chan error, 1)}
	select {
	case s.queue <- p:
	case <-s.quit:
		return fmt.Errorf("audit emit: store closed: %w", ErrUnavailable)
	case <-ctx.Done():
		return fmt.Errorf("audit emit: %w: %w", ErrUnavailable, ctx.Err())
	}
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("audit emit: waiting for commit: %w: %w", ErrUnavailable, ctx.Err())
	}
}

// run is the batcher: it owns all writes.
func (s *Store) run() {
	defer close(s.stopped)
	batch := make([]*pending, 0, s.maxBatch)
	for {
		select {
		case <-s.quit:
			return
		case p := <-s.queue:
			batch = append(batch[:0], p)
		}
	drain:
		for len(batch) < s.maxBatch {
			select {
			case p := <-s.queue:
				batch = append(batch, p)
			default:
				break drain
			}
		}
		err := s.commit(batch)
		if err == nil {
			s.commits.Add(1)
		} else {
			s.log.Error("audit commit failed; events refused", "events", len(batch), "err", err)
			err = fmt.Errorf("audit emit: commit: %w: %w", ErrUnavailable, err)
		}
		for _, p := range batch {
			p.done <- err
		}
		clear(batch)
	}
}

func (s *Store) commit(batch []*pending) error {
	// Not tied to any caller's context: a cancelled request must not abort
	// the other events sharing the transaction.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO events
		(time_ns, type, who, name, cluster, verb, session_id, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, p := range batch {
		e := p.e
		who := ""
		if e.Principal.Name != "" {
			who = e.Principal.String()
		}
		verb := ""
		if e.Kube != nil {
			verb = e.Kube.Verb
		}
		if _, err := stmt.ExecContext(ctx, e.Time.UnixNano(), string(e.Type), who, e.Principal.Name,
			e.Cluster, verb, e.SessionID, p.data); err != nil {
			return err
		}
	}
	return tx.Commit()
}
