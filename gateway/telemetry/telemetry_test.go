package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/limenhq/limen/test/otlpsink"
)

// scrape fetches the metrics from h and parses them with Prometheus's own
// text parser.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("the Prometheus text parser refused the metrics: %v\n%s", err, body)
	}
	return fams
}

// labels returns a metric's labels as a map.
func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// find returns the metric of family name whose labels include want.
func find(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	f := fams[name]
	if f == nil {
		var names []string
		for n := range fams {
			names = append(names, n)
		}
		t.Fatalf("no metric %s; have %v", name, names)
	}
next:
	for _, m := range f.GetMetric() {
		got := labels(m)
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		return m
	}
	t.Fatalf("metric %s has no series with %v", name, want)
	return nil
}

// TestMetricsScrape: what Limen records and observes comes out of the
// endpoint under conventional names, in a format Prometheus parses, with
// bounded labels.
func TestMetricsScrape(t *testing.T) {
	ctx := context.Background()
	tel, err := Start(ctx, Config{Service: "limen-proxy", Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)
	if tel.Tracing {
		t.Fatal("tracing is on without an endpoint")
	}
	m := tel.Metrics
	m.Request(ctx, HopProxy, "demo", "get", 200, 3*time.Millisecond)
	m.Request(ctx, HopProxy, "demo", "get", 200, 5*time.Millisecond)
	m.StreamEnded(ctx, HopWorker, "exec", "completed", 10, 1<<20)
	m.AuditCommit(ctx, 2*time.Millisecond)
	m.LockPush(ctx, 40*time.Millisecond)
	m.Login(ctx, "password", "ok")
	m.Denied(ctx, HopProxy, "locked")
	activated := time.Now().Add(-90 * time.Second)
	if err := tel.Observe(Probes{
		Hop:        HopProxy,
		Streams:    func() map[string]int64 { return map[string]int64{"exec": 2, "watch": 7} },
		Workers:    func() map[string]int64 { return map[string]int64{"demo": 1} },
		Bundle:     func() (string, time.Time, int64) { return "42", activated, 3 },
		AuditQueue: func() int64 { return 5 },
		Spool:      func() (int64, int64, time.Duration) { return 4096, 2, time.Minute },
	}); err != nil {
		t.Fatal(err)
	}

	fams := scrape(t, tel.Handler())
	h := find(t, fams, "limen_request_duration_seconds", map[string]string{
		"limen_hop": "proxy", "limen_cluster": "demo", "k8s_verb": "get", "http_response_status_code": "200"})
	if got := h.GetHistogram().GetSampleCount(); got != 2 {
		t.Errorf("request histogram count %d, want 2", got)
	}
	if got := find(t, fams, "limen_stream_bytes_total", map[string]string{"limen_direction": "out", "limen_stream_kind": "exec"}).GetCounter().GetValue(); got != 1<<20 {
		t.Errorf("stream bytes out %v, want %d", got, 1<<20)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"limen_streams_active", map[string]string{"limen_stream_kind": "watch"}, 7},
		{"limen_tunnel_workers", map[string]string{"limen_cluster": "demo"}, 1},
		{"limen_policy_bundle_info", map[string]string{"limen_policy_revision": "42"}, 1},
		{"limen_audit_queue_depth", nil, 5},
		{"limen_recording_spool_usage_bytes", nil, 4096},
		{"limen_recording_upload_lag_seconds", nil, 60},
	} {
		if got := find(t, fams, c.name, c.labels).GetGauge().GetValue(); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if age := find(t, fams, "limen_policy_bundle_age_seconds", nil).GetGauge().GetValue(); age < 89 || age > 200 {
		t.Errorf("bundle age %v s, want about 90", age)
	}
	if got := find(t, fams, "limen_policy_bundle_refusals_total", nil).GetCounter().GetValue(); got != 3 {
		t.Errorf("bundle refusals %v, want 3", got)
	}
	for _, name := range []string{"limen_audit_commit_duration_seconds", "limen_lock_push_duration_seconds", "limen_logins_total", "limen_denials_total", "limen_streams_ended_total"} {
		find(t, fams, name, nil)
	}
	// No user names or free text as labels.
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for k := range labels(m) {
				if strings.Contains(k, "user") || strings.Contains(k, "principal") {
					t.Errorf("%s has a per-user label %q", name, k)
				}
			}
		}
	}
}

// TestConfigValidate names the flag of a bad setting.
func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{SampleRatio: 1.5}, "trace-sample-ratio"},
		{Config{SampleRatio: -0.1}, "trace-sample-ratio"},
		{Config{OTLPEndpoint: "127.0.0.1:4317"}, "otlp-endpoint"},
	} {
		err := c.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.want)
		}
	}
	if err := (Config{OTLPEndpoint: "http://127.0.0.1:4317", SampleRatio: 0.5}).Validate(); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
}

// TestNilMetricsRecordNothing: code paths call a nil *Metrics freely.
func TestNilMetricsRecordNothing(t *testing.T) {
	var m *Metrics
	m.Request(context.Background(), HopProxy, "c", "get", 200, time.Millisecond)
	m.StreamEnded(context.Background(), HopProxy, "exec", "completed", 1, 1)
	m.Denied(context.Background(), HopProxy, "locked")
}

// TestTracesReachTheCollector: with an endpoint, spans go out over
// OTLP/gRPC with the service's name, and a child keeps its parent's trace.
func TestTracesReachTheCollector(t *testing.T) {
	sink, err := otlpsink.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Stop()
	ctx := context.Background()
	tel, err := Start(ctx, Config{Service: "limen-proxy", OTLPEndpoint: "http://" + sink.Addr, SampleRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !tel.Tracing {
		t.Fatal("tracing is off with an endpoint")
	}
	pctx, parent := tel.Tracer.Start(ctx, "parent")
	_, child := tel.Tracer.Start(pctx, "child")
	child.End()
	parent.End()
	if err := tel.Shutdown(ctx); err != nil { // flushes
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	spans, ok := sink.Wait(wctx, func(s []otlpsink.Span) bool { return len(s) >= 2 })
	if !ok {
		t.Fatalf("the collector got %d spans, want 2", len(spans))
	}
	byName := map[string]otlpsink.Span{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	p, c := byName["parent"], byName["child"]
	if p.Service != "limen-proxy" || c.TraceID != p.TraceID || c.ParentSpanID != p.SpanID {
		t.Fatalf("spans do not form one trace: %+v", spans)
	}
}
