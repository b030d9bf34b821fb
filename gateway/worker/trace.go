package worker

import (
	"context"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/limenhq/limen/gateway/grant"
	"github.com/limenhq/limen/gateway/telemetry"
)

// traceContext reads and writes W3C traceparent headers.
var traceContext = propagation.TraceContext{}

// tracer is h's tracer, or a no-op one.
func (h *Handler) tracer() trace.Tracer { return telemetry.OrNoop(h.Tracer) }

// startRequestSpan starts the worker's span of one request, as a child of
// the proxy's span named by the stream's traceparent. Only what the audit
// trail records goes into attributes: no query string, no body.
func (h *Handler) startRequestSpan(ctx context.Context, preq grant.Request) (context.Context, trace.Span) {
	if preq.TraceParent != "" {
		ctx = traceContext.Extract(ctx, propagation.MapCarrier{"traceparent": preq.TraceParent})
	}
	if h.Tracer == nil {
		// No span of the worker's own, but the proxy's still reaches the
		// API server (injectTrace): its spans join the proxy's trace.
		return ctx, telemetry.NoSpan
	}
	return h.tracer().Start(ctx, "limen.worker.request", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("limen.cluster", h.Cluster.Name), attribute.String("limen.session", preq.SessionID)))
}

// startSpan starts a child span of the request's for one step.
func (h *Handler) startSpan(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	if h.Tracer == nil {
		return ctx, telemetry.NoSpan
	}
	return h.tracer().Start(ctx, name, trace.WithSpanKind(kind))
}

// injectTrace puts ctx's span in out's traceparent header, so that the API
// server's own spans (its --tracing-config-file) join the trace. A client's
// traceparent never gets this far: the proxy drops it and starts a trace of
// its own (proxy.Kube's startRequestSpan).
func injectTrace(ctx context.Context, out *http.Request) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		out.Header.Del("tracestate")
		traceContext.Inject(ctx, propagation.HeaderCarrier(out.Header))
	}
}

// observe records the request's status on its span and its duration to
// its response head in the metrics, once.
func (x *exchange) observe(ctx context.Context, code int) {
	if x.observed {
		return
	}
	x.observed = true
	verb := "unknown"
	if x.info != nil {
		verb = x.info.Verb
	}
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(attribute.String("k8s.verb", verb), attribute.Int("http.response.status_code", code))
	if i := x.info; i != nil {
		span.SetAttributes(attribute.String("k8s.resource", i.Resource), attribute.String("k8s.namespace", i.Namespace))
	}
	if code >= 500 {
		span.SetStatus(codes.Error, strconv.Itoa(code))
	}
	x.h.Metrics.Request(ctx, telemetry.HopWorker, x.h.Cluster.Name, verb, code, x.h.Now().Sub(x.start))
}
