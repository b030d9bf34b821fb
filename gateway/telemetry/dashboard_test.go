package telemetry

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDashboardUsesExportedMetrics: every metric the Grafana dashboard in
// deploy/grafana queries is one Limen exports, under the name Prometheus
// sees, so a renamed instrument breaks this test, not the operators'
// dashboards.
func TestDashboardUsesExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("../../deploy/grafana/limen.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	ctx := context.Background()
	tel, err := Start(ctx, Config{Service: "limen-proxy"})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)
	m := tel.Metrics
	m.Request(ctx, HopProxy, "c", "get", 200, time.Millisecond)
	m.StreamEnded(ctx, HopProxy, "exec", "completed", 1, 1)
	m.AuditCommit(ctx, time.Millisecond)
	m.LockPush(ctx, time.Millisecond)
	m.Login(ctx, "password", "ok")
	m.Denied(ctx, HopProxy, "locked")
	if err := tel.Observe(Probes{Hop: HopProxy,
		Streams: func() map[string]int64 { return map[string]int64{"exec": 1} }, Workers: func() map[string]int64 { return map[string]int64{"c": 1} },
		Bundle: func() (string, time.Time, int64) { return "1", time.Now(), 0 }, AuditQueue: func() int64 { return 0 },
		Spool: func() (int64, int64, time.Duration) { return 0, 0, 0 }}); err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for name, f := range scrape(t, tel.Handler()) {
		exported[name] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				exported[name+s] = true
			}
		}
	}
	metric := regexp.MustCompile(`\blimen_[a-z_]+\b`)
	queried := 0
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, name := range metric.FindAllString(tg.Expr, -1) {
				if strings.HasPrefix(name, "limen_hop") || strings.HasPrefix(name, "limen_cluster") || strings.HasPrefix(name, "limen_stream_kind") ||
					strings.HasPrefix(name, "limen_direction") || strings.HasPrefix(name, "limen_reason") || strings.HasPrefix(name, "limen_result") ||
					strings.HasPrefix(name, "limen_login_method") {
					continue // a label, not a metric
				}
				queried++
				if !exported[name] {
					t.Errorf("panel %q queries %s, which Limen does not export", p.Title, name)
				}
			}
		}
	}
	if queried < 10 {
		t.Errorf("the dashboard queries only %d metrics", queried)
	}
}
