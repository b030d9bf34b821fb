// Package telemetry sets up Limen's OpenTelemetry: traces exported over
// OTLP (off unless an endpoint is configured) and metrics served in the
// Prometheus text format on a separate address. It also defines every
// instrument Limen records (Metrics) and the read-only probes whose state is
// observed only when the metrics are scraped (Observe), so the request path
// pays nothing for a gauge.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Config says what to export. The zero value exports nothing, and then
// Limen records no spans and keeps its metrics in memory only.
type Config struct {
	// Service names the process in every span and metric: limen-proxy or
	// limen-worker.
	Service, Version string
	// OTLPEndpoint is the OTLP/gRPC collector's URL, for example
	// http://127.0.0.1:4317 (http: no TLS). Empty: the standard
	// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
	// variable if set, else no tracing.
	OTLPEndpoint string
	// SampleRatio is the share of traces recorded, 0 to 1. A client cannot
	// raise it: the proxy starts a trace of its own for every request
	// (linked to the client's, if it sent one), and only spans under it
	// follow their parent's decision (Sampler).
	SampleRatio float64
}

// Tracing reports whether traces are exported: an endpoint is configured
// and OTEL_SDK_DISABLED is not true.
func (c Config) Tracing() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	return c.OTLPEndpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" ||
		os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Validate checks the configuration, naming the flag of what is wrong.
func (c Config) Validate() error {
	if c.SampleRatio < 0 || c.SampleRatio > 1 {
		return fmt.Errorf("trace-sample-ratio %v: must be between 0 and 1", c.SampleRatio)
	}
	if c.OTLPEndpoint != "" && !strings.HasPrefix(c.OTLPEndpoint, "http://") && !strings.HasPrefix(c.OTLPEndpoint, "https://") {
		return fmt.Errorf("otlp-endpoint %q: want a URL such as http://127.0.0.1:4317 (http: without TLS) or https://collector:4317", c.OTLPEndpoint)
	}
	return nil
}

// Telemetry is a process's tracer and meter, and the Prometheus handler of
// its metrics. Shut it down to flush the last spans.
type Telemetry struct {
	Tracer  trace.Tracer
	Meter   metric.Meter
	Metrics *Metrics
	// Tracing says whether spans are exported; when false Tracer is a no-op.
	Tracing bool

	registry *prometheus.Registry
	shutdown []func(context.Context) error
}

// Start builds the providers. It also installs them, and the W3C trace
// context propagator, as OpenTelemetry's globals, so that the libraries
// Limen uses find them.
func Start(ctx context.Context, c Config) (*Telemetry, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", c.Service),
		attribute.String("service.version", c.Version),
	)
	t := &Telemetry{registry: prometheus.NewRegistry(), Tracing: c.Tracing()}
	exp, err := otelprom.New(otelprom.WithRegisterer(t.registry), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))
	t.shutdown = append(t.shutdown, mp.Shutdown)
	t.Meter = mp.Meter("github.com/limenhq/limen")

	if t.Tracing {
		var opts []otlptracegrpc.Option
		if c.OTLPEndpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(c.OTLPEndpoint))
		}
		texp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("otlp-endpoint: %w", err)
		}
		tp := sdktrace.NewTracerProvider(
			sdktrace.WithBatcher(texp, sdktrace.WithBatchTimeout(time.Second)),
			sdktrace.WithResource(res),
			sdktrace.WithSampler(Sampler(c.SampleRatio)),
		)
		t.shutdown = append(t.shutdown, tp.Shutdown)
		otel.SetTracerProvider(tp)
		t.Tracer = tp.Tracer("github.com/limenhq/limen")
	} else {
		t.Tracer = noop.NewTracerProvider().Tracer("")
	}
	otel.SetTextMapPropagator(propagation.TraceContext{})
	if t.Metrics, err = NewMetrics(t.Meter); err != nil {
		return nil, err
	}
	return t, nil
}

// Sampler decides which traces are recorded: a root by ratio, a child as
// its parent was. It trusts a remote parent's decision, which is sound only
// because no remote parent is a client's: the proxy starts every request's
// trace as a new root (proxy.Kube's startRequestSpan), and the worker's
// remote parent is the proxy's span, named in the stream it opened.
func Sampler(ratio float64) sdktrace.Sampler {
	return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
}

// NoSpan is every span of a hop without a tracer: no context, span or
// attribute is made for it per request.
var NoSpan = trace.SpanFromContext(context.Background())

// OrNoop returns tr, or a tracer that records nothing when tr is nil: a
// hop's Tracer field may stay unset.
func OrNoop(tr trace.Tracer) trace.Tracer {
	if tr == nil {
		return noop.NewTracerProvider().Tracer("")
	}
	return tr
}

// Handler serves the metrics in the Prometheus text format.
func (t *Telemetry) Handler() http.Handler {
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// ServeMetrics serves /metrics on addr until ctx ends. Unlike pprof, the
// metrics hold no secrets, so any address is allowed; the caller's config
// says where Prometheus scrapes from.
func (t *Telemetry) ServeMetrics(ctx context.Context, addr string, log *slog.Logger) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", t.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics server", "err", err)
		}
	}()
	return ln.Addr(), nil
}

// Shutdown flushes the spans not yet exported and stops the providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}
