// Package bench measures Limen against direct access to the same API server:
// request latency and throughput, CPU and memory of the gateway processes,
// idle watches, stream throughput and the policy decision time. The
// limen-bench command (bench/cmd/limen-bench) drives it and writes
// bench/RESULTS.md; this package holds the parts testable without a cluster.
package bench

import (
	"math"
	"slices"
	"time"
)

// Histogram keeps every latency sample of a run. Runs are thousands of
// requests, so exact percentiles cost less than a bucketed estimate explains.
// The zero value is ready to use; it is not safe for concurrent use.
type Histogram struct {
	samples []time.Duration
	sorted  bool
}

// Record adds one sample.
func (h *Histogram) Record(d time.Duration) {
	h.samples = append(h.samples, d)
	h.sorted = false
}

// Merge adds every sample of o.
func (h *Histogram) Merge(o *Histogram) {
	h.samples = append(h.samples, o.samples...)
	h.sorted = false
}

// Len is the number of samples.
func (h *Histogram) Len() int { return len(h.samples) }

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100): the
// smallest sample with at least p% of the samples at or below it. It is 0
// for an empty histogram.
func (h *Histogram) Percentile(p float64) time.Duration {
	if len(h.samples) == 0 {
		return 0
	}
	if !h.sorted {
		slices.Sort(h.samples)
		h.sorted = true
	}
	rank := int(math.Ceil(p / 100 * float64(len(h.samples))))
	rank = min(max(rank, 1), len(h.samples))
	return h.samples[rank-1]
}

// Mean returns the arithmetic mean, or 0 for an empty histogram.
func (h *Histogram) Mean() time.Duration {
	if len(h.samples) == 0 {
		return 0
	}
	var sum time.Duration
	for _, s := range h.samples {
		sum += s
	}
	return sum / time.Duration(len(h.samples))
}
