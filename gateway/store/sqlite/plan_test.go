package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

func queryPlan(t *testing.T, query string, args ...any) string {
	t.Helper()
	s, err := OpenAudit(context.Background(), filepath.Join(t.TempDir(), AuditFile), false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rows, err := s.db.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	return strings.Join(plan, "; ")
}

// TestSessionStartUsesTheSessionIndex: the proxy looks a session.start up
// for every session event of a session its registry forgot, so the lookup
// must use events_session, not scan the table (the bench found a scan
// taking 38% of the proxy's CPU).
func TestSessionStartUsesTheSessionIndex(t *testing.T) {
	if p := queryPlan(t, sessionEventQuery, "abc", "session.start"); !strings.Contains(p, "USING INDEX events_session") {
		t.Fatalf("session.start lookup plan %q: want it to use index events_session", p)
	}
}

// TestOutcomeLookupUsesTheSessionIndex: every kube.sent a search reads asks
// for its outcome, so that lookup must use events_session.
func TestOutcomeLookupUsesTheSessionIndex(t *testing.T) {
	if p := queryPlan(t, "SELECT id FROM events WHERE "+unknownOutcome); !strings.Contains(p, "USING INDEX events_session") {
		t.Fatalf("outcome lookup plan %q: want it to use index events_session", p)
	}
}
