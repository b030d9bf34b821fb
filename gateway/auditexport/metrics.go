package auditexport

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// RegisterMetrics registers the exports' gauges on m, read at each scrape:
// limen.audit.export.lag (events stored after the cursor),
// limen.audit.export.lag.age (seconds since the oldest of them was stored)
// and limen.audit.export.failures (failed deliveries since start), each
// with the sink's name as limen.audit.sink.
func RegisterMetrics(m metric.Meter, xs ...*Exporter) error {
	if len(xs) == 0 {
		return nil
	}
	lag, err := m.Int64ObservableGauge("limen.audit.export.lag", metric.WithUnit("{event}"),
		metric.WithDescription("Audit events stored and not yet delivered to the export's receiver."))
	if err != nil {
		return err
	}
	age, err := m.Int64ObservableGauge("limen.audit.export.lag.age", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest audit event not yet delivered to the export's receiver; 0 when none waits."))
	if err != nil {
		return err
	}
	failures, err := m.Int64ObservableCounter("limen.audit.export.failures", metric.WithUnit("{attempt}"),
		metric.WithDescription("Failed deliveries of a batch to the export's receiver since start (each is retried)."))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		for _, x := range xs {
			attrs := metric.WithAttributes(attribute.String("limen.audit.sink", x.Name()))
			o.ObserveInt64(failures, x.Failures(), attrs)
			l, err := x.Lag(ctx)
			if err != nil {
				continue // the store is unreadable: no value rather than a false one
			}
			o.ObserveInt64(lag, l.Events, attrs)
			var secs int64
			if !l.Oldest.IsZero() {
				secs = int64(time.Since(l.Oldest).Seconds())
			}
			o.ObserveInt64(age, secs, attrs)
		}
		return nil
	}, lag, age, failures)
	return err
}
