package tunnel

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	for _, tt := range []struct {
		name string
		rand func(int64) int64
		want []time.Duration
	}{
		{"no jitter drawn (low end)", func(int64) int64 { return 0 },
			[]time.Duration{50, 100, 200, 400, 500, 500}},
		{"full jitter drawn (high end)", func(n int64) int64 { return n - 1 },
			[]time.Duration{100, 200, 400, 800, 1000, 1000}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := backoff{min: 100 * time.Millisecond, max: time.Second, rand: tt.rand}
			for i, w := range tt.want {
				if got := b.next(); got != w*time.Millisecond {
					t.Fatalf("attempt %d: %v, want %v", i, got, w*time.Millisecond)
				}
			}
			b.reset()
			if got := b.next(); got != tt.want[0]*time.Millisecond {
				t.Fatalf("after reset: %v", got)
			}
		})
	}
}

func TestBackoffJitterInRange(t *testing.T) {
	b := backoff{min: 10 * time.Millisecond, max: 30 * time.Second}
	for i := 0; i < 200; i++ {
		nominal := min(10*time.Millisecond<<min(b.attempt, 20), 30*time.Second)
		got := b.next()
		if got < nominal/2 || got > nominal {
			t.Fatalf("attempt %d: %v outside [%v, %v]", i, got, nominal/2, nominal)
		}
	}
}
