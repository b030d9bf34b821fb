package soak

import (
	"testing"
	"time"
)

// These check the soak's own judges without a control plane: a verdict
// that cannot say "growing" proves nothing.

func TestVerdictCatchesGrowth(t *testing.T) {
	started := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	run := func(goroutinesPerMin int, heapPerMin int64) []verdict {
		var ss []sample
		for i := range 61 {
			noise := int64(i%3) << 20 // ±1 MiB of GC noise
			ss = append(ss, sample{at: started.Add(time.Duration(i) * time.Minute), stats: []Stats{
				{RSS: 60<<20 + noise, HeapInuse: 20<<20 + noise/2, Goroutines: 100 + i%2},
				{RSS: 50<<20 + noise, HeapInuse: 10<<20 + int64(i)*heapPerMin, Goroutines: 80 + i*goroutinesPerMin},
			}})
		}
		return verdicts(ss, started, warmup(time.Hour))
	}
	growing := func(vs []verdict) []string {
		var g []string
		for _, v := range vs {
			if v.growing() {
				g = append(g, v.process+" "+v.metric)
			}
		}
		return g
	}
	if g := growing(run(0, 0)); len(g) != 0 {
		t.Errorf("flat run judged growing: %v", g)
	}
	if g := growing(run(1, 0)); len(g) != 1 || g[0] != "worker goroutines" {
		t.Errorf("a goroutine a minute: growing %v, want worker goroutines", g)
	}
	if g := growing(run(0, 256<<10)); len(g) != 1 || g[0] != "worker Go heap (HeapInuse after GC)" {
		t.Errorf("256 KiB a minute: growing %v, want the worker's heap", g)
	}
}

func TestKubeTimeout(t *testing.T) {
	ts := int64(300)
	for _, tc := range []struct {
		timeout *int64
		lasted  time.Duration
		want    bool
	}{
		{&ts, 300 * time.Second, true},
		{&ts, 310 * time.Second, true},
		{&ts, 200 * time.Second, false},
		{&ts, 400 * time.Second, false},
		{nil, 31 * time.Minute, true},
		{nil, 59 * time.Minute, true},
		{nil, 5 * time.Minute, false},
		{nil, 62 * time.Minute, false},
	} {
		if _, got := kubeTimeout(tc.timeout, tc.lasted); got != tc.want {
			t.Errorf("kubeTimeout(%v, %s) = %v, want %v", tc.timeout != nil, tc.lasted, got, tc.want)
		}
	}
}

func TestParseProfiles(t *testing.T) {
	if n, err := goroutineTotal("goroutine profile: total 42\n3 @ 0x1\n"); err != nil || n != 42 {
		t.Errorf("goroutineTotal = %d, %v", n, err)
	}
	if _, err := goroutineTotal("<html>"); err == nil {
		t.Error("goroutineTotal accepted a page that is no profile")
	}
	if n, err := memStat("heap profile: 1: 2 [3: 4] @ heap/1048576\n\n# runtime.MemStats\n# HeapAlloc = 10\n# HeapInuse = 2048\n", "HeapInuse"); err != nil || n != 2048 {
		t.Errorf("memStat(HeapInuse) = %d, %v", n, err)
	}
	if _, err := memStat("# HeapAlloc = 10\n", "HeapInuse"); err == nil {
		t.Error("memStat found a figure that is not there")
	}
}
