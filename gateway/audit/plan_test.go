package audit

import (
	"context"
	"strings"
	"testing"
)

// TestSessionStartUsesTheSessionIndex: the proxy looks a session.start up
// for every session event of a session its registry forgot, so the lookup
// must use events_session, not scan the table (the bench found a scan
// taking 38% of the proxy's CPU).
func TestSessionStartUsesTheSessionIndex(t *testing.T) {
	s, _ := openTemp(t, Options{})
	rows, err := s.db.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+sessionEventQuery, "abc", string(TypeSessionStart))
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
	if p := strings.Join(plan, "; "); !strings.Contains(p, "USING INDEX events_session") {
		t.Fatalf("session.start lookup plan %q: want it to use index events_session", p)
	}
}
