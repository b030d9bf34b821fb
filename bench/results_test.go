package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// cell returns a cell of n requests that each took d, over elapsed.
func cell(d time.Duration, n int, elapsed time.Duration) *Cell {
	c := &Cell{Elapsed: elapsed}
	for range n {
		c.Hist.Record(d)
	}
	return c
}

// TestGoals: #33's goals are judged against their fixed bounds (added GET
// latency, LIST throughput share, CPU share, memory per watch, the policy
// miss), and each figure names the careless hops of the same run.
func TestGoals(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name              string
		limen, limen99    time.Duration // GET c=1 p50 and p99 (direct 1 ms)
		limenTput         int           // LIST c=16 requests per second (direct 1000)
		proxyCPU          time.Duration // per 100 GETs (API server: 10 ms)
		watchBytes        int64         // per 10 watches
		policyMiss        float64       // ns per op
		want              map[string]bool
		wantFloorInFigure bool
	}{
		{"every goal missed", 3 * ms, 5 * ms, 800, 7 * ms, 400 << 10, 11000,
			map[string]bool{"Added p50": false, "Added p99": false, "Throughput": false, "Proxy + worker CPU": false, "≤ 32 KiB": false, "A policy decision": false}, true},
		{"every goal met", 2 * ms, 3500 * time.Microsecond, 850, 6 * ms, 320 << 10, 9000,
			map[string]bool{"Added p50": true, "Added p99": true, "Throughput": true, "Proxy + worker CPU": true, "≤ 32 KiB": true, "A policy decision": true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			direct := cell(ms, 100, time.Second)
			direct99 := cell(ms, 100, time.Second)
			limen := cell(tt.limen, 98, time.Second)
			limen.Hist.Record(tt.limen99)
			limen.Hist.Record(tt.limen99)
			two := cell(1800*time.Microsecond, 100, time.Second)
			r := &Results{
				Cells: []CellPair{
					{Op: "GET one ConfigMap", Concurrency: 1, Direct: direct, Baseline: cell(1300*time.Microsecond, 100, time.Second), Limen: limen},
					{Op: "LIST 500 ConfigMaps", Concurrency: 16, Direct: cell(ms, 1000, time.Second),
						Baseline: cell(ms, 950, time.Second), Limen: cell(ms, tt.limenTput, time.Second)},
				},
				CPU: []CPUUse{{Op: "GET one ConfigMap", Proxy: tt.proxyCPU, APIServerLimen: 10 * ms, LimenRequests: 100,
					Baseline: 4 * ms, APIServerBaseline: 10 * ms, BaselineRequests: 100}},
				Watch:  WatchMemory{N: 10, Proxy: tt.watchBytes, OneHop: 300 << 10, TwoHops: 500 << 10},
				Policy: []PolicyResult{{Name: "BenchmarkGroupsMiss/index", NsPerOp: tt.policyMiss}, {Name: "BenchmarkGroupsMiss/rego", NsPerOp: 1e6}},
				Hops:   &HopFloor{Rows: []HopRow{{Op: "GET one ConfigMap", Concurrency: 1, Direct: direct99, Two: two, APIServer: 100 * ms, TwoCPU: 90 * ms}}},
			}
			seen := map[string]int{}
			for _, g := range r.Goals() {
				for prefix, want := range tt.want {
					if !strings.HasPrefix(g.Text, prefix) {
						continue
					}
					seen[prefix]++
					if g.Met != want {
						t.Errorf("%s: met=%v (%s), want %v", g.Text, g.Met, g.Figure, want)
					}
				}
				if strings.HasPrefix(g.Text, "Added p50") && !strings.Contains(g.Figure, "two careless hops +0.800") {
					t.Errorf("%s: figure %q does not name two careless hops' +0.800 ms", g.Text, g.Figure)
				}
				if strings.HasPrefix(g.Text, "Proxy + worker CPU") && !strings.Contains(g.Figure, "two careless hops 90%") {
					t.Errorf("%s: figure %q does not name two careless hops' 90%%", g.Text, g.Figure)
				}
				if strings.HasPrefix(g.Text, "≤ 32 KiB") && !strings.Contains(g.Figure, "two careless hops 50.0 KiB") {
					t.Errorf("%s: figure %q does not name two careless hops' 50 KiB", g.Text, g.Figure)
				}
			}
			for prefix := range tt.want {
				if seen[prefix] == 0 {
					t.Errorf("no goal %q", prefix)
				}
			}
			if seen["A policy decision"] != 1 {
				t.Errorf("%d policy goals, want 1 (the index's miss only)", seen["A policy decision"])
			}
		})
	}
}

// TestMarkdownHasThreeColumns: every latency row names direct, the
// baseline and Limen, and both ratios.
func TestMarkdownHasThreeColumns(t *testing.T) {
	ms := time.Millisecond
	r := &Results{Cells: []CellPair{{Op: "GET one ConfigMap", Concurrency: 1,
		Direct: cell(ms, 10, time.Second), Baseline: cell(2*ms, 10, time.Second), Limen: cell(4*ms, 10, time.Second)}}}
	var b bytes.Buffer
	r.Markdown(&b)
	if !strings.Contains(b.String(), "| GET one ConfigMap, c=1, p50 latency (ms) | 1.000 | 2.000 | 4.000 | 2.00× | 4.00× |") {
		t.Fatalf("no three-column p50 row:\n%s", b.String())
	}
}

// TestStreamGoals: exec output, kubectl cp and port-forward (both ways) are
// judged against 85% of direct, exec input is reported but not a goal, and text
// recordings against 1.5× their output.
func TestStreamGoals(t *testing.T) {
	r := &Results{Streams: []StreamPair{
		{Name: "exec output (text)", Transport: "WebSocket", Direction: "down", Direct: 100, Limen: 95, Recorded: true, RecordingRatio: 1.1},
		{Name: "exec output (binary)", Transport: "WebSocket", Direction: "down", Direct: 100, Limen: 80, Recorded: true, RecordingRatio: 2.4},
		{Name: "exec input", Transport: "SPDY", Direction: "up", Direct: 100, Limen: 10},
		{Name: "port-forward", Transport: "SPDY", Direction: "up", Direct: 100, Limen: 84},
		{Name: "cp", Transport: "SPDY", Direction: "up", Direct: 100, Limen: 86, OneHop: 97, TwoHops: 91},
		{Name: "exec output (text)", Transport: "SPDY", Direction: "down", Direct: 100, Limen: 99, Recorded: true, RecordingRatio: 1.6},
	}}
	got := map[string]bool{}
	for _, g := range r.Goals() {
		got[g.Text] = g.Met
		if strings.Contains(g.Text, "(cp, SPDY, up)") && g.Figure != "86% (one careless hop 97%, two careless hops 91%)" {
			t.Errorf("%s: figure %q, want the careless hops beside Limen's 86%%", g.Text, g.Figure)
		}
	}
	want := map[string]bool{
		"Stream throughput ≥ 85% of direct (exec output (text), WebSocket, down)":    true,
		"Stream throughput ≥ 85% of direct (cp, SPDY, up)":                           true,
		"Recording ≤ 1.5× the output for text (exec output (text), WebSocket, down)": true,
		"Stream throughput ≥ 85% of direct (exec output (binary), WebSocket, down)":  false,
		"Stream throughput ≥ 85% of direct (port-forward, SPDY, up)":                 false,
		"Stream throughput ≥ 85% of direct (exec output (text), SPDY, down)":         true,
		"Recording ≤ 1.5× the output for text (exec output (text), SPDY, down)":      false,
	}
	for text, met := range want {
		if g, ok := got[text]; !ok || g != met {
			t.Errorf("goal %q: present=%v met=%v, want met=%v", text, ok, g, met)
		}
	}
	for text := range got {
		if strings.Contains(text, "exec input") || strings.Contains(text, "Recording ≤ 1.5× the output for text (exec output (binary)") {
			t.Errorf("unexpected goal %q", text)
		}
	}
}

// TestStreamTable: one row per stream with direct, the careless hops, Limen,
// the ratio and the recording ratio; an error shows instead of a ratio.
func TestStreamTable(t *testing.T) {
	r := &Results{StreamSize: 32 << 20, StreamRuns: 1, Streams: []StreamPair{
		{Name: "exec output (text)", Transport: "WebSocket", Direction: "down", Direct: 100, Limen: 50, Recorded: true, RecordingRatio: 1.12,
			OneHop: 90, TwoHops: 80, ProxyCPU: 2500 * time.Microsecond, WorkerCPU: 4 * time.Millisecond,
			OneHopCPU: 1500 * time.Microsecond, TwoHopsCPU: 3 * time.Millisecond},
		{Name: "port-forward", Transport: "SPDY in WebSocket", Direction: "up", Direct: 100, Limen: 0, Err: "limen: broken",
			OneHop: 95, HopErr: "two-hops: refused"},
	}}
	var b bytes.Buffer
	r.Markdown(&b)
	out := b.String()
	for _, want := range []string{
		"| exec output (text) | WebSocket | down | 100.0 | 90.0 (0.90×) | 80.0 (0.80×) | 50.0 | 0.50× | 1.12× | 2.5 ms, 4.0 ms | 1.5 ms, 3.0 ms |",
		"| port-forward | SPDY in WebSocket | up | 100.0 | 95.0 (0.95×) | — (error: two-hops: refused) | 0.0 (error: limen: broken) | — | not recorded | — | — |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks row %q:\n%s", want, out)
		}
	}
}

// TestStreamBudget: the CPU per MiB Limen may add for 0.85 of direct is
// the machine's capacity at that rate less the other processes' share; a
// direct run that left cores idle leaves more.
func TestStreamBudget(t *testing.T) {
	ms := time.Millisecond
	bound := StreamPair{Name: "exec output (text)", Transport: "WebSocket", Direction: "down",
		DirectMachine: MachineLoad{PerMiB: 17 * ms, Busy: 1}, LimenMachine: MachineLoad{PerMiB: 30 * ms, Busy: 0.99},
		ProxyCPU: 4 * ms, WorkerCPU: 7 * ms}
	if b, ok := bound.LimenBudget(0.85); !ok || b != 1*ms {
		t.Errorf("budget = %v, %v; want 1ms (17/0.85 = 20 ms, less 19 ms of other processes)", b, ok)
	}
	idle := bound
	idle.DirectMachine.Busy = 0.5
	if b, ok := idle.LimenBudget(0.85); !ok || b != 21*ms {
		t.Errorf("half-idle budget = %v, %v; want 21ms (17/0.5/0.85 = 40 ms, less 19 ms)", b, ok)
	}
	if _, ok := (StreamPair{}).LimenBudget(0.85); ok {
		t.Error("a budget without figures")
	}
	over := bound
	over.ProxyCPU, over.WorkerCPU = ms, ms
	r := &Results{Cores: 2, Streams: []StreamPair{bound, idle, over}}
	var b bytes.Buffer
	r.Markdown(&b)
	out := b.String()
	for _, want := range []string{
		"| exec output (text) | WebSocket | down | 17.0 ms, 100% | 30.0 ms, 99% | 11.0 ms | 1.0 ms |",
		"| exec output (text) | WebSocket | down | 17.0 ms, 50% | 30.0 ms, 99% | 11.0 ms | 21.0 ms |",
		"| 2.0 ms | none (-8.0 ms): the other processes alone spend more |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// TestTracingTable: the report compares tracing off and on from the run's
// own cells.
func TestTracingTable(t *testing.T) {
	ms := time.Millisecond
	r := &Results{Tracing: &TracingCost{Off: cell(2*ms, 100, time.Second), On: cell(3*ms, 100, time.Second),
		OffCPU: 100 * ms, OnCPU: 150 * ms}}
	var b bytes.Buffer
	r.Markdown(&b)
	for _, want := range []string{"## Tracing", "| p50 latency (ms) | 2.000 | 3.000 | 1.50× |",
		"| proxy + worker CPU s per 1,000 requests | 1.000 | 1.500 | 1.50× |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// TestHopTable: latency added over direct, throughput of direct and CPU per
// request as a share of the API server's, for each path of the same run.
func TestHopTable(t *testing.T) {
	ms := time.Millisecond
	r := &Results{Hops: &HopFloor{Rows: []HopRow{{Op: "GET one ConfigMap", Concurrency: 1,
		Direct: cell(2*ms, 100, time.Second), One: cell(2500*time.Microsecond, 100, time.Second),
		Two: cell(3*ms, 50, time.Second), Via: cell(4*ms, 50, time.Second),
		APIServer: 100 * ms, OneCPU: 50 * ms, TwoCPU: 50 * ms, ViaCPU: 100 * ms}}}}
	var b bytes.Buffer
	r.Markdown(&b)
	out := b.String()
	for _, want := range []string{
		"| GET one ConfigMap, c=1: p50, ms (added) | 2.000 | +0.500 | +1.000 | +2.000 |",
		"| GET one ConfigMap, c=1: requests/s (of direct) | 100 | 100 (1.00×) | 50 (0.50×) | 50 (0.50×) |",
		"| GET one ConfigMap, c=1: CPU ms per request (of the API server's) | 1.000 | 0.500 (50%) | 1.000 (100%) | 2.000 (200%) |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// TestWatchHops: the careless hops' memory per watch shows beside Limen's.
func TestWatchHops(t *testing.T) {
	r := &Results{Watch: WatchMemory{N: 100, Proxy: 4000 << 10, Worker: 2000 << 10, OneHop: 1000 << 10, TwoHops: 3000 << 10}}
	var b bytes.Buffer
	r.Markdown(&b)
	want := "| Memory per idle watch, one careless hop / two careless hops (both processes) | — | 10.0 KiB / 30.0 KiB | — |"
	if !strings.Contains(b.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, b.String())
	}
}
