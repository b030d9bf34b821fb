package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"
	"go.opentelemetry.io/otel/trace"
)

// TestTelemetryFlagsRefused: a bad log level, sample ratio or collector
// URL stops the proxy and the worker at start, naming the key.
func TestTelemetryFlagsRefused(t *testing.T) {
	for _, cmd := range []string{"proxy", "worker"} {
		for _, c := range []struct {
			flag, value string
		}{
			{"--log-level", "verbose"},
			{"--trace-sample-ratio", "2"},
			{"--otlp-endpoint", "127.0.0.1:4317"},
		} {
			t.Run(cmd+c.flag, func(t *testing.T) {
				root := newRootCmd()
				root.SetOut(io.Discard)
				root.SetErr(io.Discard)
				args := []string{cmd, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}
				if cmd == "worker" {
					args = []string{cmd, "--data-dir", t.TempDir(), "--proxy", "127.0.0.1:1", "--kube-cluster", "demo", "--join-token", "x"}
				}
				root.SetArgs(append(args, c.flag, c.value))
				err := root.Execute()
				if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(c.flag, "--")) {
					t.Fatalf("%s %s %s: %v, want an error naming %s", cmd, c.flag, c.value, err, c.flag)
				}
			})
		}
	}
}

// TestProxyServesMetrics: limen proxy --metrics-listen serves metrics a
// scraper can read, named for the service.
func TestProxyServesMetrics(t *testing.T) {
	port := freeTCPPort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := newRootCmd()
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"proxy", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0",
		"--metrics-listen", fmt.Sprintf("127.0.0.1:%d", port)})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	deadline := time.Now().Add(30 * time.Second)
	var body string
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the proxy stopped: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, want := range []string{`service_name="limen-proxy"`, "limen_policy_bundle_refusals_total"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}
	cancel()
	if err := <-done; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestLogsCarryTraceIDs: a line logged inside a trace carries its ids, one
// logged outside does not, and --log-level filters.
func TestLogsCarryTraceIDs(t *testing.T) {
	v := viper.New()
	v.Set("log-level", "warn")
	var out strings.Builder
	log, err := newLogger(&out, v)
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	log.WarnContext(ctx, "inside", "session", "s1")
	log.Warn("outside")
	log.InfoContext(ctx, "below the level")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("logged %d lines, want 2 (info is below warn):\n%s", len(lines), out.String())
	}
	if !strings.Contains(lines[0], "trace_id="+sc.TraceID().String()) || !strings.Contains(lines[0], "span_id="+sc.SpanID().String()) {
		t.Errorf("the line inside a trace lacks its ids: %s", lines[0])
	}
	if strings.Contains(lines[1], "trace_id") {
		t.Errorf("the line outside a trace has a trace id: %s", lines[1])
	}
}
