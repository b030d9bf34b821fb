package bench

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // reverse order: Percentile must sort
	}
	for _, tc := range []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one sample p50", ms(7), 50, 7 * time.Millisecond},
		{"one sample p99", ms(7), 99, 7 * time.Millisecond},
		{"two samples p50 is the lower", ms(1, 2), 50, 1 * time.Millisecond},
		{"two samples p51 is the upper", ms(1, 2), 51, 2 * time.Millisecond},
		{"1..100 p50", ms(hundred...), 50, 50 * time.Millisecond},
		{"1..100 p90", ms(hundred...), 90, 90 * time.Millisecond},
		{"1..100 p99", ms(hundred...), 99, 99 * time.Millisecond},
		{"1..100 p100", ms(hundred...), 100, 100 * time.Millisecond},
		{"tiny p is the minimum", ms(3, 1, 2), 0.001, 1 * time.Millisecond},
		{"outlier only in p99", ms(1, 1, 1, 1, 1, 1, 1, 1, 1, 500), 90, 1 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Histogram
			for _, s := range tc.samples {
				h.Record(s)
			}
			if got := h.Percentile(tc.p); got != tc.want {
				t.Errorf("Percentile(%v) = %v, want %v", tc.p, got, tc.want)
			}
		})
	}
}

func TestMergeAndMean(t *testing.T) {
	var a, b Histogram
	a.Record(1 * time.Millisecond)
	a.Record(3 * time.Millisecond)
	_ = a.Percentile(50) // sorted, then merged: must re-sort
	b.Record(2 * time.Millisecond)
	b.Record(0)
	a.Merge(&b)
	if a.Len() != 4 || a.Percentile(50) != time.Millisecond || a.Mean() != 1500*time.Microsecond {
		t.Fatalf("merged: len %d p50 %v mean %v", a.Len(), a.Percentile(50), a.Mean())
	}
}
