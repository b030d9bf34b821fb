package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Probes are read-only views of a process's state that Observe reads when
// the metrics are scraped, never on the request path. Any may be nil.
type Probes struct {
	// Hop is HopProxy or HopWorker.
	Hop string
	// Streams counts the live streams by kind.
	Streams func() map[string]int64
	// Workers counts the connected workers by cluster (the proxy).
	Workers func() map[string]int64
	// Bundle is the active policy bundle: its revision ("" when none is
	// active), when it was activated, and the refusals since start.
	Bundle func() (revision string, activated time.Time, refused int64)
	// AuditQueue is the number of audit events waiting for their commit.
	AuditQueue func() int64
	// Spool is the recording spool: bytes used, recordings waiting for
	// upload and the age of the oldest of them (the worker).
	Spool func() (used, pending int64, oldest time.Duration)
}

// Observe registers gauges that read p at each scrape.
func (t *Telemetry) Observe(p Probes) error {
	m := t.Meter
	hop := attribute.String("limen.hop", p.Hop)
	var (
		streams, workers, bundleInfo, bundleAge, queue, spoolUsed, spoolPending, spoolLag metric.Int64Observable
		refusals                                                                          metric.Int64Observable
		observables                                                                       []metric.Observable
		err                                                                               error
	)
	gauge := func(dst *metric.Int64Observable, want bool, name, unit, desc string) {
		if err != nil || !want {
			return
		}
		var g metric.Int64ObservableGauge
		g, err = m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		*dst = g
		observables = append(observables, g)
	}
	gauge(&streams, p.Streams != nil, "limen.streams.active", "{stream}", "Streams open now, by hop and kind.")
	gauge(&workers, p.Workers != nil, "limen.tunnel.workers", "{worker}", "Workers connected to the proxy, by cluster.")
	gauge(&bundleInfo, p.Bundle != nil, "limen.policy.bundle.info", "", "1 for the active policy bundle, with its revision.")
	gauge(&bundleAge, p.Bundle != nil, "limen.policy.bundle.age", "s", "Seconds since the active policy bundle was activated.")
	gauge(&queue, p.AuditQueue != nil, "limen.audit.queue.depth", "{event}", "Audit events waiting for their commit.")
	gauge(&spoolUsed, p.Spool != nil, "limen.recording.spool.usage", "By", "Bytes in the worker's recording spool.")
	gauge(&spoolPending, p.Spool != nil, "limen.recording.spool.pending", "{recording}", "Finished recordings waiting for upload.")
	gauge(&spoolLag, p.Spool != nil, "limen.recording.upload.lag", "s", "Age of the oldest recording waiting for upload; 0 when none waits.")
	if err == nil && p.Bundle != nil {
		var c metric.Int64ObservableCounter
		c, err = m.Int64ObservableCounter("limen.policy.bundle.refusals", metric.WithUnit("{bundle}"),
			metric.WithDescription("Policy bundles fetched and refused since start (bad signature, older revision, invalid data)."))
		refusals = c
		observables = append(observables, c)
	}
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if p.Streams != nil {
			for kind, n := range p.Streams() {
				o.ObserveInt64(streams, n, metric.WithAttributes(hop, attribute.String("limen.stream.kind", kind)))
			}
		}
		if p.Workers != nil {
			for cluster, n := range p.Workers() {
				o.ObserveInt64(workers, n, metric.WithAttributes(attribute.String("limen.cluster", cluster)))
			}
		}
		if p.Bundle != nil {
			rev, at, refused := p.Bundle()
			if rev != "" {
				o.ObserveInt64(bundleInfo, 1, metric.WithAttributes(hop, attribute.String("limen.policy.revision", rev)))
				o.ObserveInt64(bundleAge, int64(time.Since(at).Seconds()), metric.WithAttributes(hop))
			}
			o.ObserveInt64(refusals, refused, metric.WithAttributes(hop))
		}
		if p.AuditQueue != nil {
			o.ObserveInt64(queue, p.AuditQueue(), metric.WithAttributes(hop))
		}
		if p.Spool != nil {
			used, pending, oldest := p.Spool()
			o.ObserveInt64(spoolUsed, used)
			o.ObserveInt64(spoolPending, pending)
			o.ObserveInt64(spoolLag, int64(oldest.Seconds()))
		}
		return nil
	}, observables...)
	return err
}
