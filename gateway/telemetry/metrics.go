package telemetry

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Hops: the process that measured.
const (
	HopProxy  = "proxy"
	HopWorker = "worker"
)

// Metrics are the instruments Limen records as things happen. Every
// attribute has a bounded set of values: cluster names come from the
// operator's configuration, verbs and codes from Kubernetes, reasons from
// Limen's own lists. No user name is ever an attribute.
//
// A nil *Metrics records nothing, so code paths may call it unconditionally.
type Metrics struct {
	requestDuration metric.Float64Histogram
	streamBytes     metric.Int64Counter
	streamsEnded    metric.Int64Counter
	auditCommit     metric.Float64Histogram
	lockPush        metric.Float64Histogram
	logins          metric.Int64Counter
	denials         metric.Int64Counter
}

// Latency buckets in seconds, from a cached GET to a slow LIST.
var durationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// NewMetrics creates the instruments on m.
func NewMetrics(m metric.Meter) (*Metrics, error) {
	var x Metrics
	var err error
	mk := func(f func() error) {
		if err == nil {
			err = f()
		}
	}
	mk(func() (e error) {
		x.requestDuration, e = m.Float64Histogram("limen.request.duration", metric.WithUnit("s"),
			metric.WithDescription("Time from a request's arrival at this hop to the end of its response head, by hop, cluster, verb and status code."),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		return e
	})
	mk(func() (e error) {
		x.streamBytes, e = m.Int64Counter("limen.stream.bytes", metric.WithUnit("By"),
			metric.WithDescription("Bytes carried by ended streams (exec, attach, port-forward, watches, logs), by hop, kind and direction."))
		return e
	})
	mk(func() (e error) {
		x.streamsEnded, e = m.Int64Counter("limen.streams.ended", metric.WithUnit("{stream}"),
			metric.WithDescription("Streams ended, by hop, kind and end reason."))
		return e
	})
	mk(func() (e error) {
		x.auditCommit, e = m.Float64Histogram("limen.audit.commit.duration", metric.WithUnit("s"),
			metric.WithDescription("Time to make a batch of audit events durable."),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		return e
	})
	mk(func() (e error) {
		x.lockPush, e = m.Float64Histogram("limen.lock.push.duration", metric.WithUnit("s"),
			metric.WithDescription("Time from a lock or kill to every connected worker's acknowledgement."),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		return e
	})
	mk(func() (e error) {
		x.logins, e = m.Int64Counter("limen.logins", metric.WithUnit("{login}"),
			metric.WithDescription("Logins and certificate renewals, by method and result."))
		return e
	})
	mk(func() (e error) {
		x.denials, e = m.Int64Counter("limen.denials", metric.WithUnit("{request}"),
			metric.WithDescription("Requests refused, by hop and reason."))
		return e
	})
	if err != nil {
		return nil, err
	}
	return &x, nil
}

// Bounded label values for what a request names but Limen does not know.
const (
	// UnknownCluster is the cluster label of a request for a cluster that
	// is neither configured nor served by a connected worker.
	UnknownCluster = "unknown"
	// OtherVerb is the verb label of a request whose verb is none of
	// Verb's; UnknownVerb that of a request that could not be classified.
	OtherVerb   = "other"
	UnknownVerb = "unknown"
)

// Verb is the verb label of v: a Kubernetes verb the API server derives
// from a resource request, or the lower-case method of a non-resource
// request, as it names them; anything else (a method a client made up) is
// OtherVerb, so that no client can add a label value.
func Verb(v string) string {
	switch v {
	case "get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "proxy",
		"post", "put", "head", "options", UnknownVerb:
		return v
	}
	return OtherVerb
}

// Request records one request's duration at hop. The caller bounds the
// cluster (a configured one or UnknownCluster); the verb is bounded here.
func (x *Metrics) Request(ctx context.Context, hop, cluster, verb string, code int, d time.Duration) {
	if x == nil {
		return
	}
	x.requestDuration.Record(ctx, d.Seconds(), metric.WithAttributes(
		attribute.String("limen.hop", hop), attribute.String("limen.cluster", cluster),
		attribute.String("k8s.verb", Verb(verb)), attribute.String("http.response.status_code", strconv.Itoa(code))))
}

// StreamEnded records an ended stream: its bytes each way and its reason.
func (x *Metrics) StreamEnded(ctx context.Context, hop, kind, reason string, in, out int64) {
	if x == nil {
		return
	}
	h, k := attribute.String("limen.hop", hop), attribute.String("limen.stream.kind", kind)
	x.streamBytes.Add(ctx, in, metric.WithAttributes(h, k, attribute.String("limen.direction", "in")))
	x.streamBytes.Add(ctx, out, metric.WithAttributes(h, k, attribute.String("limen.direction", "out")))
	x.streamsEnded.Add(ctx, 1, metric.WithAttributes(h, k, attribute.String("limen.reason", reason)))
}

// AuditCommit records the time one audit batch took to become durable.
func (x *Metrics) AuditCommit(ctx context.Context, d time.Duration) {
	if x == nil {
		return
	}
	x.auditCommit.Record(ctx, d.Seconds())
}

// LockPush records how long a lock or kill took to be acknowledged by the
// workers.
func (x *Metrics) LockPush(ctx context.Context, d time.Duration) {
	if x == nil {
		return
	}
	x.lockPush.Record(ctx, d.Seconds())
}

// Login counts a login by method (password, token, renew, oidc) and result
// (ok, or the refusal's reason).
func (x *Metrics) Login(ctx context.Context, method, result string) {
	if x == nil {
		return
	}
	x.logins.Add(ctx, 1, metric.WithAttributes(attribute.String("limen.login.method", method), attribute.String("limen.result", result)))
}

// Denied counts a refused request at hop with reason (a short code from
// Limen's own list, never free text).
func (x *Metrics) Denied(ctx context.Context, hop, reason string) {
	if x == nil {
		return
	}
	x.denials.Add(ctx, 1, metric.WithAttributes(attribute.String("limen.hop", hop), attribute.String("limen.reason", reason)))
}
