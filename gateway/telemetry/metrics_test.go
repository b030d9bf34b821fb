package telemetry

import (
	"context"
	"testing"
	"time"
)

// BenchmarkMetricsRequest is what each request pays at each hop for its
// latency histogram.
func BenchmarkMetricsRequest(b *testing.B) {
	tel, err := Start(context.Background(), Config{Service: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		tel.Metrics.Request(ctx, HopProxy, "prod", "list", 200, 3*time.Millisecond)
	}
}

// TestVerbLabelsAreBounded: every verb the API server derives, and every
// standard method of a non-resource request, is its own label; anything
// else a client can send is "other", whichever hop records it.
func TestVerbLabelsAreBounded(t *testing.T) {
	for in, want := range map[string]string{
		"get": "get", "list": "list", "watch": "watch", "create": "create", "update": "update", "patch": "patch",
		"delete": "delete", "deletecollection": "deletecollection", "proxy": "proxy", "post": "post", "put": "put",
		"head": "head", "options": "options", "unknown": "unknown",
		"foon": "other", "": "other", "GET": "other", "connect": "other", "get\n": "other", "trace": "other",
	} {
		if got := Verb(in); got != want {
			t.Errorf("Verb(%q) = %q, want %q", in, got, want)
		}
	}
	tel, err := Start(context.Background(), Config{Service: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	tel.Metrics.Request(context.Background(), HopWorker, "prod", "foon", 404, time.Millisecond)
	fams := scrape(t, tel.Handler())
	find(t, fams, "limen_request_duration_seconds", map[string]string{"k8s_verb": "other", "limen_hop": "worker"})
}
