package proxy

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/limenhq/limen/gateway/kpath"
	"github.com/limenhq/limen/gateway/reqinfo"
	"github.com/limenhq/limen/gateway/telemetry"
)

// traceContext reads and writes W3C traceparent headers.
var traceContext = propagation.TraceContext{}

// tracer is k's tracer, or a no-op one.
func (k *Kube) tracer() trace.Tracer { return telemetry.OrNoop(k.Tracer) }

// startRequestSpan starts the proxy's span of one request, always the root
// of a trace of its own. A client's traceparent is not taken as the parent:
// its sampled flag would decide what the proxy records, and its trace id
// (which the ratio sampler reads) would too, so anyone could make every
// request of theirs recorded. The proxy is where untrusted input ends, so
// its trace starts there; the client's span, if valid, is only linked, and
// its traceparent and tracestate are removed so that neither the worker nor
// the API server continues it either. Attributes are audit fields only: no
// query string, no body, no header.
func (k *Kube) startRequestSpan(r *http.Request) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", r.Method))}
	// Canonical keys, so that a request without them costs no allocation.
	if _, sent := r.Header["Traceparent"]; sent {
		client := trace.SpanContextFromContext(traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
		if client.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: client}))
		}
		delete(r.Header, "Traceparent")
	}
	delete(r.Header, "Tracestate")
	if k.Tracer == nil {
		return r.Context(), telemetry.NoSpan
	}
	return k.tracer().Start(r.Context(), "limen.proxy.request", opts...)
}

// clusterLabel is the metric label of cluster: its name when KnownCluster
// knows it, else telemetry.UnknownCluster.
func (k *Kube) clusterLabel(cluster string) string {
	if cluster != "" && k.KnownCluster != nil && k.KnownCluster(cluster) {
		return cluster
	}
	return telemetry.UnknownCluster
}

// step starts a child span of the request's for one step of it.
func (k *Kube) step(ctx context.Context, name string) (context.Context, trace.Span) {
	if k.Tracer == nil {
		return ctx, telemetry.NoSpan
	}
	return k.tracer().Start(ctx, name)
}

// traceParent is the traceparent naming ctx's span, for the worker: its
// span becomes this one's child. Empty outside a recording span.
func traceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	traceContext.Inject(ctx, c)
	return c["traceparent"]
}

// observer is the ResponseWriter of a request the proxy traces or
// measures: the first status written (or the switch of protocols, at
// Hijack) ends the request's latency, which goes on the span and into the
// metrics once. A stream's later bytes do not count.
type observer struct {
	http.ResponseWriter
	k       *Kube
	r       *http.Request
	start   time.Time
	cluster string
	path    kpath.Path
	// verb is the request's, once track has classified it; a request
	// refused before is classified when observed.
	verb string
	done bool
}

func (o *observer) WriteHeader(code int) {
	o.observe(code)
	o.ResponseWriter.WriteHeader(code)
}

func (o *observer) Write(p []byte) (int, error) {
	o.observe(http.StatusOK)
	return o.ResponseWriter.Write(p)
}

// Hijack is the switch to a stream (exec, attach, port-forward): 101.
func (o *observer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	o.observe(http.StatusSwitchingProtocols)
	return http.NewResponseController(o.ResponseWriter).Hijack()
}

func (o *observer) Flush() { _ = http.NewResponseController(o.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the connection's writer.
func (o *observer) Unwrap() http.ResponseWriter { return o.ResponseWriter }

// observe records the request's status on its span and its latency in the
// metrics, the first time only.
func (o *observer) observe(code int) {
	if o.done {
		return
	}
	o.done = true
	verb := o.verb
	if verb == "" {
		verb = telemetry.UnknownVerb
		if info, err := reqinfo.Classify(o.r, o.path); err == nil {
			verb = info.Verb
		}
	}
	span := trace.SpanFromContext(o.r.Context())
	span.SetAttributes(attribute.String("limen.cluster", o.cluster), attribute.String("k8s.verb", verb),
		attribute.Int("http.response.status_code", code))
	if code >= 500 {
		span.SetStatus(codes.Error, http.StatusText(code))
	}
	o.k.Metrics.Request(o.r.Context(), telemetry.HopProxy, o.k.clusterLabel(o.cluster), verb, code, o.k.Now().Sub(o.start))
}

// denialCode is the bounded label of a denial's reason for the metrics:
// the words before its detail ("locked", "authentication", …), never a
// name or a path.
func denialCode(reason string) string {
	code, _, _ := strings.Cut(reason, ":")
	if strings.HasPrefix(code, "policy grants no group") {
		return "no group"
	}
	switch code {
	case "non-canonical path", "cluster mismatch", "authentication", "locked", "session refused", "client", "scope":
		return code
	}
	return "other"
}
