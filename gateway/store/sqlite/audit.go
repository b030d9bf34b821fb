package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/limenhq/limen/gateway/store"
)

var auditMigrations = []store.Migration{
	{Version: 1, SQL: `CREATE TABLE IF NOT EXISTS events (
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
CREATE INDEX IF NOT EXISTS events_session ON events (session_id) WHERE session_id != '';`},
}

// Audit is the audit driver over audit.db (WAL, synchronous=FULL: an event
// survives a power cut once Append returned). A refusal's action has no
// column: it is read from the event's JSON (json_extract), as the files of
// earlier releases hold it.
type Audit struct {
	db      *sql.DB
	path    string
	insert  *sql.Stmt // nil when read-only
	measure *sql.Stmt
	// inserts[n-1] stores n rows in one statement, for the small batches
	// a group commit mostly carries (nil when read-only).
	inserts [smallBatch]*sql.Stmt
}

// smallBatch is the largest batch stored by one multi-row INSERT in
// SQLite's own implicit transaction: no BEGIN and COMMIT through
// database/sql, a sixth of a small batch's CPU
// (BenchmarkEmitSerial, go test -cpuprofile).
const smallBatch = 4

// OpenAudit opens the audit file at path, creating and migrating it unless
// readOnly.
func OpenAudit(ctx context.Context, path string, readOnly bool) (*Audit, error) {
	db, err := open(ctx, path, "audit", auditMigrations, options{readOnly: readOnly, fullSync: true, noMkdir: true})
	if err != nil {
		return nil, fmt.Errorf("open audit store %s: %w", path, err)
	}
	s := &Audit{db: db, path: path}
	// Prepared once: parsing them on every commit was a sixth of the
	// append path's CPU (go test -cpuprofile, BenchmarkEmitSerial).
	if s.measure, err = db.PrepareContext(ctx, measureQuery); err == nil && !readOnly {
		s.insert, err = db.PrepareContext(ctx, insertQuery)
		for n := 1; n <= smallBatch && err == nil; n++ {
			s.inserts[n-1], err = db.PrepareContext(ctx, insertRows(n))
		}
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open audit store %s: %w", path, err)
	}
	return s, nil
}

func (s *Audit) Close() error { return s.db.Close() }

// Location is the file's path.
func (s *Audit) Location() string { return s.path }

const insertQuery = `INSERT INTO events
	(time_ns, type, who, name, cluster, verb, session_id, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`

// insertRows is the INSERT of n rows in one statement.
func insertRows(n int) string {
	return insertQuery + strings.Repeat(", (?, ?, ?, ?, ?, ?, ?, ?)", n-1)
}

func (s *Audit) Append(ctx context.Context, rows []store.AuditRecord) error {
	if s.insert == nil {
		return errors.New("audit store opened read-only")
	}
	if n := len(rows); n > 0 && n <= smallBatch {
		// One statement is one transaction: every row or none.
		args := make([]any, 0, 8*n)
		for _, r := range rows {
			args = append(args, r.TimeNS, r.Type, r.Who, r.Name, r.Cluster, r.Verb, r.SessionID, r.Data)
		}
		_, err := s.inserts[n-1].ExecContext(ctx, args...)
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()                   //nolint:errcheck // after Commit it is a no-op
	stmt := tx.StmtContext(ctx, s.insert) // prepared once per connection
	defer stmt.Close()
	for _, r := range rows {
		if _, err := stmt.ExecContext(ctx, r.TimeNS, r.Type, r.Who, r.Name, r.Cluster, r.Verb, r.SessionID, r.Data); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// outcomeMissing holds for a kube.sent row (the table's name is events)
// whose session id has no outcome: no kube.request and no auth.denied, the
// worker's answer. The condition that o.session_id is not empty lets
// SQLite use the partial index events_session.
const outcomeMissing = `NOT EXISTS (SELECT 1 FROM events AS o WHERE o.session_id = events.session_id
	AND o.session_id != '' AND o.type IN ('` + store.AuditKubeRequest + `', '` + store.AuditAuthDenied + `'))`

// unknownOutcome is the column Search reads OutcomeUnknown from.
const unknownOutcome = `(type = '` + store.AuditKubeSent + `' AND ` + outcomeMissing + `)`

func (s *Audit) Search(ctx context.Context, q store.AuditQuery) ([]store.AuditRecord, error) {
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
		add("type = ?", q.Type)
	}
	if q.Action != "" {
		add("type = ? AND json_extract(data, '$.denied.action') = ?", store.AuditAuthDenied, q.Action)
	}
	if q.SinceNS != 0 {
		add("time_ns >= ?", q.SinceNS)
	}
	switch {
	case q.OutcomeUnknown:
		add(unknownOutcome)
	case q.Type == "":
		add("(type != ? OR "+outcomeMissing+")", store.AuditKubeSent)
	}
	query := "SELECT " + recordColumns + ", " + unknownOutcome + " FROM events"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY time_ns DESC, id DESC LIMIT ?"
	args = append(args, max(q.Limit, 1))
	return s.records(ctx, true, query, args...)
}

const recordColumns = `id, time_ns, type, who, name, cluster, verb, session_id, data`

func (s *Audit) records(ctx context.Context, withUnknown bool, query string, args ...any) ([]store.AuditRecord, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.AuditRecord
	for rows.Next() {
		var r store.AuditRecord
		dest := []any{&r.Seq, &r.TimeNS, &r.Type, &r.Who, &r.Name, &r.Cluster, &r.Verb, &r.SessionID, &r.Data}
		if withUnknown {
			dest = append(dest, &r.OutcomeUnknown)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// "session_id != ”" lets SQLite use the partial index events_session:
// without it, every lookup scans the whole table.
const sessionEventQuery = `SELECT ` + recordColumns + ` FROM events WHERE session_id = ? AND session_id != '' AND type = ? ORDER BY id LIMIT 1`

func (s *Audit) SessionEvent(ctx context.Context, sessionID, typ string) (store.AuditRecord, bool, error) {
	rs, err := s.records(ctx, false, sessionEventQuery, sessionID, typ)
	if err != nil || len(rs) == 0 {
		return store.AuditRecord{}, false, err
	}
	return rs[0], true, nil
}

func (s *Audit) After(ctx context.Context, afterSeq int64, limit int) ([]store.AuditRecord, error) {
	return s.records(ctx, false, `SELECT `+recordColumns+` FROM events WHERE id > ? ORDER BY id LIMIT ?`, afterSeq, max(limit, 1))
}

func (s *Audit) DeleteBefore(ctx context.Context, beforeNS, throughSeq int64, limit int) (int64, error) {
	if s.insert == nil {
		return 0, errors.New("audit store opened read-only")
	}
	res, err := s.db.ExecContext(ctx, `DELETE FROM events WHERE id IN
		(SELECT id FROM events WHERE time_ns < ? AND id <= ? ORDER BY id LIMIT ?)`, beforeNS, throughSeq, max(limit, 1))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s *Audit) Span(ctx context.Context) (first, last, oldestNS int64, err error) {
	var f, l, o sql.NullInt64
	err = s.db.QueryRowContext(ctx, "SELECT min(id), max(id), min(time_ns) FROM events").Scan(&f, &l, &o)
	return f.Int64, l.Int64, o.Int64, err
}

const measureQuery = "SELECT p.page_count, f.freelist_count, z.page_size " +
	"FROM pragma_page_count() AS p, pragma_freelist_count() AS f, pragma_page_size() AS z"

// Used is the bytes held by the file's pages in use: free pages are reused
// before the file grows, so deleting events makes room.
func (s *Audit) Used(ctx context.Context) (int64, error) {
	var pages, free, size int64
	if err := s.measure.QueryRowContext(ctx).Scan(&pages, &free, &size); err != nil {
		return 0, err
	}
	return (pages - free) * size, nil
}

// Size is the file's size.
func (s *Audit) Size(context.Context) (int64, error) {
	fi, err := os.Stat(s.path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (s *Audit) Count(ctx context.Context) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM events").Scan(&n)
	return n, err
}

// DB is the file's handle, for this engine's tests and for tests of the
// audit package that play an operator's sqlite3 shell.
func (s *Audit) DB() *sql.DB { return s.db }
