package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.opentelemetry.io/otel/trace"

	"github.com/limenhq/limen/gateway/buildinfo"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/telemetry"
	"github.com/limenhq/limen/gateway/worker"
)

// addTelemetryFlags adds the log, metrics and trace flags of a long-running
// process (proxy, worker).
func addTelemetryFlags(f *pflag.FlagSet) {
	f.String("log-level", "info", "log level: debug, info, warn or error")
	f.String("metrics-listen", "", "serve Prometheus metrics at http://HOST:PORT/metrics (off by default; keep it off the public network)")
	f.String("otlp-endpoint", "", "export traces over OTLP/gRPC to this URL, for example http://127.0.0.1:4317 (http: without TLS); "+
		"the standard OTEL_EXPORTER_OTLP_* variables work too; off by default")
	f.Float64("trace-sample-ratio", 1, "share of new traces recorded when tracing is on, 0 to 1; requests inside a sampled trace are always recorded")
}

// newLogger builds the process's logger at the configured level. Records
// logged with a context inside a trace carry its trace and span ids.
func newLogger(w io.Writer, v *viper.Viper) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(v.GetString("log-level"))); err != nil {
		return nil, fmt.Errorf("log-level %q: want debug, info, warn or error", v.GetString("log-level"))
	}
	return slog.New(traceHandler{slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})}), nil
}

// traceHandler adds trace_id and span_id to records logged inside a trace.
type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(as)}
}
func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}

// telemetryConfig reads the trace settings; Validate names a bad key.
func telemetryConfig(v *viper.Viper, service string) telemetry.Config {
	return telemetry.Config{Service: service, Version: buildinfo.Version, OTLPEndpoint: v.GetString("otlp-endpoint"),
		SampleRatio: v.GetFloat64("trace-sample-ratio")}
}

// startTelemetry starts tracing and metrics for service as configured.
// Shut it down when the process ends, to flush the last spans.
func startTelemetry(ctx context.Context, v *viper.Viper, service string, log *slog.Logger) (*telemetry.Telemetry, error) {
	c := telemetryConfig(v, service)
	tel, err := telemetry.Start(ctx, c)
	if err != nil {
		return nil, err
	}
	if tel.Tracing {
		log.Info("tracing on", "otlp_endpoint", c.OTLPEndpoint, "sample_ratio", c.SampleRatio)
	}
	return tel, nil
}

// serveMetrics serves the metrics if metrics-listen is set, once every
// gauge is registered.
func serveMetrics(ctx context.Context, v *viper.Viper, tel *telemetry.Telemetry, p telemetry.Probes, log *slog.Logger) error {
	if err := tel.Observe(p); err != nil {
		return err
	}
	addr := strings.TrimSpace(v.GetString("metrics-listen"))
	if addr == "" {
		return nil
	}
	a, err := tel.ServeMetrics(ctx, addr, log)
	if err != nil {
		return err
	}
	log.Info("metrics served", "url", "http://"+a.String()+"/metrics")
	return nil
}

// stopTelemetry flushes the spans not yet exported, waiting at most a few
// seconds for the collector.
func stopTelemetry(tel *telemetry.Telemetry, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		log.Warn("telemetry shutdown", "err", err)
	}
}

// streamCounts counts the live sessions of reg by kind.
func streamCounts(reg *sessions.Registry) func() map[string]int64 {
	return func() map[string]int64 {
		out := map[string]int64{}
		for _, i := range reg.List() {
			if i.Live() {
				out[string(i.Kind)]++
			}
		}
		return out
	}
}

// bundleProbe reads the active bundle from the engine's status.
func bundleProbe(e *policy.Engine) func() (string, time.Time, int64) {
	return func() (string, time.Time, int64) {
		st := e.Status()
		return st.Revision, st.ActivatedAt, int64(st.Refused)
	}
}

// proxyProbes are the proxy's scrape-time gauges.
func proxyProbes(s *proxy.Server) telemetry.Probes {
	return telemetry.Probes{
		Hop:     telemetry.HopProxy,
		Streams: streamCounts(s.Sessions),
		Workers: func() map[string]int64 {
			out := map[string]int64{}
			for _, w := range s.Tunnel.Workers() {
				if w.Ready {
					out[w.Cluster]++
				}
			}
			return out
		},
		Bundle:     bundleProbe(s.Policy),
		AuditQueue: func() int64 { return int64(s.Audit.Waiting()) },
	}
}

// workerProbes are the worker's scrape-time gauges; the spool is measured
// from its directory, as `limen worker status` does.
func workerProbes(s *worker.Server, dataDir string, spoolMax int64) telemetry.Probes {
	dir := worker.SpoolDir(dataDir)
	return telemetry.Probes{
		Hop:     telemetry.HopWorker,
		Streams: streamCounts(s.Sessions),
		Bundle:  bundleProbe(s.Policy),
		Spool: func() (int64, int64, time.Duration) {
			u, err := recording.SpoolUsageOf(dir, spoolMax)
			if err != nil {
				return 0, 0, 0
			}
			return u.Used, int64(u.Pending), oldestCast(dir)
		},
	}
}

// oldestCast is the age of the oldest finished recording in a spool
// directory: how far uploads lag behind.
func oldestCast(dir string) time.Duration {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var oldest time.Time
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".cast") {
			continue
		}
		if info, err := e.Info(); err == nil && (oldest.IsZero() || info.ModTime().Before(oldest)) {
			oldest = info.ModTime()
		}
	}
	if oldest.IsZero() {
		return 0
	}
	return time.Since(oldest)
}

// streamMetrics counts each ended stream's bytes and reason at hop.
func streamMetrics(m *telemetry.Metrics, hop string) func(sessions.Info) {
	return func(i sessions.Info) {
		m.StreamEnded(context.Background(), hop, string(i.Kind), string(i.Reason), i.BytesIn, i.BytesOut)
	}
}

// hooks returns the tracer and metrics a hop's request path should use: nil
// for what is off, so that a process without tracing or a metrics address
// pays nothing per request.
func hooks(v *viper.Viper, tel *telemetry.Telemetry) (trace.Tracer, *telemetry.Metrics) {
	var tr trace.Tracer
	var m *telemetry.Metrics
	if tel.Tracing {
		tr = tel.Tracer
	}
	if strings.TrimSpace(v.GetString("metrics-listen")) != "" {
		m = tel.Metrics
	}
	return tr, m
}
