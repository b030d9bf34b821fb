package proxy_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/store/postgres"
	pgtest "github.com/limenhq/limen/test/postgres"
)

// TestFiguresAuditOnPostgres measures what the shared store adds to a
// request (issue #28: the added latency may grow by no more than the
// database's own commit time). Through one proxy and the in-process worker
// stand-in, sequential GETs with the audit trail in SQLite, then in a real
// PostgreSQL, and that server's own commit time (one row, one COMMIT, on a
// connection of its own). Figures only, logged: it sets no threshold, and
// runs only with LIMEN_FIGURES=1 (make scale), on a quiet machine.
func TestFiguresAuditOnPostgres(t *testing.T) {
	if os.Getenv("LIMEN_FIGURES") == "" {
		t.Skip("figures only: run with LIMEN_FIGURES=1")
	}
	const n = 400
	ctx := context.Background()
	honest := map[string]func(*hostileStream){"honest": func(s *hostileStream) { s.reply(s.honest()) }}
	measure := func(e *hostileEnv) (p50, p99 time.Duration) {
		for range 20 { // warm the connections and caches
			if _, _, err := e.get(ctx, "honest", ""); err != nil {
				t.Fatal(err)
			}
		}
		d := make([]time.Duration, n)
		for i := range d {
			start := time.Now()
			code, _, err := e.get(ctx, "honest", "")
			if err != nil || code != 200 {
				t.Fatalf("GET: %d %v", code, err)
			}
			d[i] = time.Since(start)
		}
		slices.Sort(d)
		return d[n/2], d[n*99/100]
	}
	sq50, sq99 := measure(startHostile(t, honest))
	srv := pgtest.Start(t)
	url := srv.Database(t)
	pg50, pg99 := measure(startHostile(t, honest, func(c *proxy.Config) {
		b, err := postgres.Open(ctx, postgres.Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		c.Store = b
	}))
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE commit_probe (id bigserial PRIMARY KEY, data text)"); err != nil {
		t.Fatal(err)
	}
	c := make([]time.Duration, n)
	for i := range c {
		start := time.Now()
		if _, err := conn.Exec(ctx, "INSERT INTO commit_probe (data) VALUES ('x')"); err != nil {
			t.Fatal(err)
		}
		c[i] = time.Since(start)
	}
	slices.Sort(c)
	t.Logf("GET through one proxy, %d sequential requests, audit trail in SQLite: p50 %s p99 %s", n, sq50, sq99)
	t.Logf("the same, audit trail in PostgreSQL: p50 %s p99 %s (p50 added over SQLite: %s)", pg50, pg99, pg50-sq50)
	t.Logf("PostgreSQL's own commit (one row, autocommit): p50 %s p99 %s", c[n/2], c[n*99/100])
}
