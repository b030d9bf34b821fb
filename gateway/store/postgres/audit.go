package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/limenhq/limen/gateway/store"
)

var auditMigrations = []store.Migration{
	{Version: 1, SQL: `CREATE TABLE audit_events (
	seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	time_ns    bigint NOT NULL,
	type       text NOT NULL,
	who        text NOT NULL,
	name       text NOT NULL,
	cluster    text NOT NULL,
	verb       text NOT NULL,
	session_id text NOT NULL,
	action     text NOT NULL,
	data       text NOT NULL
);
CREATE INDEX audit_events_time    ON audit_events (time_ns);
CREATE INDEX audit_events_name    ON audit_events (name, time_ns);
CREATE INDEX audit_events_cluster ON audit_events (cluster, time_ns);
CREATE INDEX audit_events_session ON audit_events (session_id) WHERE session_id <> ''`},
}

// auditDB is the audit driver. A refusal's action has a column of its own
// here (the SQLite files of earlier releases read it from the JSON).
type auditDB struct {
	pool  *pgxpool.Pool
	where string
}

func (*auditDB) Close() error { return nil }

// Location names the database.
func (s *auditDB) Location() string { return s.where }

var auditColumns = []string{"time_ns", "type", "who", "name", "cluster", "verb", "session_id", "action", "data"}

// Append stores rows in one transaction, sent as one pipeline (BEGIN, the
// lock, one INSERT of every row, COMMIT): one round trip to the server for
// the batch, so that the proxy waits for little more than the server's
// own commit. It first takes a transaction-level advisory lock, so that
// the commits of all proxies are serialized: a sequence number is handed
// out at insert and would otherwise commit out of order, and a reader
// following Seq (audit export) would skip the late one for ever. The
// group commit keeps this cheap: one lock per batch, not per event.
// synchronous_commit is the server's (on by default): COMMIT returns once
// the WAL is flushed. On any error the transaction is rolled back, and the
// pool closes a connection not left idle, so none is reused mid-transaction.
func (s *auditDB) Append(ctx context.Context, rows []store.AuditRecord) error {
	cols := make([][]string, len(auditColumns)-1)
	times := make([]int64, len(rows))
	for i, r := range rows {
		times[i] = r.TimeNS
		for j, v := range []string{r.Type, r.Who, r.Name, r.Cluster, r.Verb, r.SessionID, r.Action, string(r.Data)} {
			cols[j] = append(cols[j], v)
		}
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SELECT pg_advisory_xact_lock($1)", auditLock)
	b.Queue(`INSERT INTO audit_events (`+strings.Join(auditColumns, ", ")+`)
		SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[])`,
		times, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6], cols[7])
	b.Queue("COMMIT")
	br := s.pool.SendBatch(ctx, b)
	var err error
	for range 4 {
		ct, e := br.Exec()
		if e != nil {
			err = e
			break
		}
		if ct.Insert() && ct.RowsAffected() != int64(len(rows)) {
			err = fmt.Errorf("inserted %d of %d events", ct.RowsAffected(), len(rows))
			break
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// outcomeMissing holds for a kube.sent row e whose session has no outcome
// (kube.request, or the worker's auth.denied).
const outcomeMissing = `NOT EXISTS (SELECT 1 FROM audit_events AS o WHERE o.session_id = e.session_id
	AND o.session_id <> '' AND o.type IN ('` + store.AuditKubeRequest + `', '` + store.AuditAuthDenied + `'))`

const unknownOutcome = `(e.type = '` + store.AuditKubeSent + `' AND ` + outcomeMissing + `)`

const recordColumns = `e.seq, e.time_ns, e.type, e.who, e.name, e.cluster, e.verb, e.session_id, e.action, e.data`

func (s *auditDB) Search(ctx context.Context, q store.AuditQuery) ([]store.AuditRecord, error) {
	var where []string
	var args []any
	arg := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
	if q.User != "" {
		p := arg(q.User)
		where = append(where, "(e.name = "+p+" OR e.who = "+p+")")
	}
	if q.Cluster != "" {
		where = append(where, "e.cluster = "+arg(q.Cluster))
	}
	if q.Verb != "" {
		where = append(where, "e.verb = "+arg(q.Verb))
	}
	if q.Type != "" {
		where = append(where, "e.type = "+arg(q.Type))
	}
	if q.Action != "" {
		where = append(where, "e.type = "+arg(store.AuditAuthDenied)+" AND e.action = "+arg(q.Action))
	}
	if q.SinceNS != 0 {
		where = append(where, "e.time_ns >= "+arg(q.SinceNS))
	}
	switch {
	case q.OutcomeUnknown:
		where = append(where, unknownOutcome)
	case q.Type == "":
		where = append(where, "(e.type <> "+arg(store.AuditKubeSent)+" OR "+outcomeMissing+")")
	}
	query := "SELECT " + recordColumns + ", " + unknownOutcome + " FROM audit_events AS e"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY e.time_ns DESC, e.seq DESC LIMIT " + arg(max(q.Limit, 1))
	return s.records(ctx, true, query, args...)
}

func (s *auditDB) records(ctx context.Context, withUnknown bool, query string, args ...any) ([]store.AuditRecord, error) {
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.AuditRecord, error) {
		var r store.AuditRecord
		var data string
		dest := []any{&r.Seq, &r.TimeNS, &r.Type, &r.Who, &r.Name, &r.Cluster, &r.Verb, &r.SessionID, &r.Action, &data}
		if withUnknown {
			dest = append(dest, &r.OutcomeUnknown)
		}
		err := row.Scan(dest...)
		r.Data = []byte(data)
		return r, err
	})
}

func (s *auditDB) SessionEvent(ctx context.Context, sessionID, typ string) (store.AuditRecord, bool, error) {
	rs, err := s.records(ctx, false, `SELECT `+recordColumns+` FROM audit_events AS e
		WHERE e.session_id = $1 AND e.session_id <> '' AND e.type = $2 ORDER BY e.seq LIMIT 1`, sessionID, typ)
	if err != nil || len(rs) == 0 {
		return store.AuditRecord{}, false, err
	}
	return rs[0], true, nil
}

func (s *auditDB) After(ctx context.Context, afterSeq int64, limit int) ([]store.AuditRecord, error) {
	return s.records(ctx, false, `SELECT `+recordColumns+` FROM audit_events AS e WHERE e.seq > $1 ORDER BY e.seq LIMIT $2`,
		afterSeq, max(limit, 1))
}

func (s *auditDB) DeleteBefore(ctx context.Context, beforeNS, throughSeq int64, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM audit_events WHERE seq IN
		(SELECT seq FROM audit_events WHERE time_ns < $1 AND seq <= $2 ORDER BY seq LIMIT $3)`, beforeNS, throughSeq, max(limit, 1))
	return tag.RowsAffected(), err
}

func (s *auditDB) Span(ctx context.Context) (first, last, oldestNS int64, err error) {
	var f, l, o *int64
	err = s.pool.QueryRow(ctx, "SELECT min(seq), max(seq), min(time_ns) FROM audit_events").Scan(&f, &l, &o)
	if f != nil {
		first, last, oldestNS = *f, *l, *o
	}
	return first, last, oldestNS, err
}

// Used is the table's size with its indexes and TOAST: what the events
// take. Deleted rows' space is reused after (auto)vacuum.
func (s *auditDB) Used(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, "SELECT pg_total_relation_size('audit_events')").Scan(&n)
	return n, err
}

// Size is the whole database's size.
func (s *auditDB) Size(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, "SELECT pg_database_size(current_database())").Scan(&n)
	return n, err
}

func (s *auditDB) Count(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, "SELECT count(*) FROM audit_events").Scan(&n)
	return n, err
}
