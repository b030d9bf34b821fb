package bench

import (
	"reflect"
	"testing"
)

func TestParseBenchOutput(t *testing.T) {
	out := []byte(`goos: linux
goarch: amd64
pkg: github.com/limenhq/limen/gateway/policy
cpu: AMD EPYC
BenchmarkGroups/uncached-2         	   10000	    236150 ns/op	    240160 cpu-ns/op	   18225 B/op	     396 allocs/op
BenchmarkGroups/cached-2           	 1389837	       902.8 ns/op	       975.0 cpu-ns/op	      64 B/op	       1 allocs/op
BenchmarkGroupsSmall               	    9393	    144936 ns/op
BenchmarkBroken-2 	 --- FAIL
PASS
ok  	github.com/limenhq/limen/gateway/policy	7.529s
`)
	want := []PolicyResult{
		{Name: "BenchmarkGroups/uncached", NsPerOp: 236150, CPUNsOp: 240160, AllocsOp: 396},
		{Name: "BenchmarkGroups/cached", NsPerOp: 902.8, CPUNsOp: 975, AllocsOp: 1},
		{Name: "BenchmarkGroupsSmall", NsPerOp: 144936},
	}
	if got := ParseBenchOutput(out); !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseBenchOutput =\n%+v\nwant\n%+v", got, want)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(tc.in); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
