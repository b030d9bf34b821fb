package bench

import (
	"fmt"
	"strings"
	"time"
)

// Results is everything one limen-bench run measured, rendered by Markdown.
type Results struct {
	Mode       string // "quick" or "full"
	Command    string
	Commit     string
	Started    time.Time
	Duration   time.Duration
	CPUModel   string
	Cores      int
	GoVersion  string
	Kubectl    string
	LoadStart  string // /proc/loadavg at the start and the end
	LoadEnd    string
	Recording  string // whether session recording was on, and why
	Requests   int    // per latency cell
	StreamSize int64  // bytes per stream transfer
	StreamRuns int

	Cells   []CellPair
	CPU     []CPUUse
	Memory  Memory
	Watch   WatchMemory
	Streams []StreamPair
	Policy  []PolicyResult
	// Tracing is the request path's cost with tracing on; nil: not run.
	Tracing *TracingCost
	Hops    *HopFloor
	// Profiles are pprof summaries of the proxy and worker and strace's
	// fsync count, taken when a goal is not met.
	Profiles []Profile
	Notes    []string
}

// Profile is one section of "Where the time goes": preformatted text.
type Profile struct{ Title, Text string }

// CellPair is one latency cell measured direct, through the one-hop
// baseline proxy and through Limen.
type CellPair struct {
	Op          string // "GET one ConfigMap", "LIST 500 ConfigMaps"
	Concurrency int
	Direct      *Cell
	Baseline    *Cell
	Limen       *Cell
}

// CPUUse is the CPU the processes spent over every latency cell of one
// operation.
type CPUUse struct {
	Op              string
	DirectRequests  int
	LimenRequests   int
	APIServerDirect time.Duration // API server, serving the direct requests
	APIServerLimen  time.Duration // API server, serving the Limen requests
	Proxy, Worker   time.Duration // serving the Limen requests

	BaselineRequests  int
	APIServerBaseline time.Duration // API server, serving the baseline's requests
	Baseline          time.Duration // the baseline proxy, serving its requests
}

// PerThousand returns d per 1,000 of n requests, in seconds.
func PerThousand(d time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return d.Seconds() * 1000 / float64(n)
}

// Gateway is the proxy and worker CPU per 1,000 requests over the API
// server's for the same requests.
func (c CPUUse) Gateway() float64 {
	return ratio(PerThousand(c.Proxy+c.Worker, c.LimenRequests), PerThousand(c.APIServerLimen, c.LimenRequests))
}

// BaselineShare is the baseline proxy's CPU per 1,000 requests over the API
// server's for the same requests.
func (c CPUUse) BaselineShare() float64 {
	return ratio(PerThousand(c.Baseline, c.BaselineRequests), PerThousand(c.APIServerBaseline, c.BaselineRequests))
}

// Memory is the resident size of the gateway processes, in bytes.
type Memory struct {
	ProxyIdle, WorkerIdle, APIServerIdle int64
	ProxyLoad, WorkerLoad, APIServerLoad int64 // peaks during the Limen latency cells
}

// WatchMemory is the resident size added by N idle watches, in bytes.
type WatchMemory struct {
	N               int
	APIServerDirect int64
	APIServerLimen  int64
	Proxy, Worker   int64
	// OneHop and TwoHops are what the watches added to one careless hop
	// (the baseline's process) and to two (both careless processes).
	OneHop, TwoHops int64
	Err             string
}

// PerWatch returns the bytes per watch of a delta.
func (w WatchMemory) PerWatch(delta int64) float64 {
	if w.N == 0 {
		return 0
	}
	return float64(delta) / float64(w.N)
}

// TracingCost is GET one ConfigMap at concurrency 1 through Limen with
// tracing off and through a second Limen with tracing on at 100% sampling,
// with the CPU each pair of processes spent.
type TracingCost struct {
	Off, On       *Cell
	OffCPU, OnCPU time.Duration
}

// HopFloor compares Limen with one and with two careless hops in the same
// run: the two-hop figures are the floor of any gateway that, like Limen,
// puts a second process and a second TLS connection between the user and
// the API server, before it checks, signs or audits anything.
type HopFloor struct{ Rows []HopRow }

// HopRow is one operation at one concurrency, measured direct, through one
// careless hop, through two, and through Limen, one after the other, with
// the CPU the API server (direct) and each path's own processes spent.
type HopRow struct {
	Op                     string
	Concurrency            int
	Direct, One, Two, Via  *Cell
	APIServer              time.Duration // during the direct cell
	OneCPU, TwoCPU, ViaCPU time.Duration
}

// StreamPair is one stream throughput figure, in MiB/s, direct and through
// Limen (the median of the runs).
type StreamPair struct {
	Name      string // what moves: "exec output (text)", "port-forward", …
	Transport string // "WebSocket", "SPDY", "SPDY in WebSocket"
	Direction string // "down" (to kubectl) or "up" (from kubectl)
	// Direct and Limen are MiB/s.
	Direct, Limen float64
	// OneHop and TwoHops are MiB/s through one and two careless hops (the
	// baseline, and a second one in front of it), which record nothing
	// (0: not measured); HopErr says why one failed.
	OneHop, TwoHops float64
	HopErr          string
	// Recorded says the stream is recorded through Limen; RecordingRatio is
	// then the recordings' bytes over the output's bytes (0: not measured).
	Recorded       bool
	RecordingRatio float64
	// ProxyCPU and WorkerCPU are each process's CPU time per MiB carried
	// during the Limen runs (0: not measured). Unlike the rate, CPU per
	// byte hardly moves with the machine's load.
	ProxyCPU, WorkerCPU time.Duration
	// OneHopCPU and TwoHopsCPU are the careless hops' processes' CPU time
	// per MiB during their runs (two hops: both processes together; 0: not
	// measured): what relaying alone costs, beside Limen's.
	OneHopCPU, TwoHopsCPU time.Duration
	// DirectMachine and LimenMachine are the whole machine's CPU during
	// each side's runs (every process on it, the bench's own included), per
	// MiB carried and as a share of all cores (0: not measured). They show
	// whether a stream is bound by the machine's cores, and so what CPU per
	// MiB Limen may add at most for a given share of direct throughput.
	DirectMachine, LimenMachine MachineLoad
	Err                         string
}

// MachineLoad is the machine's CPU during some stream runs: time per MiB
// carried, and the share of all cores' time that was busy.
type MachineLoad struct {
	PerMiB time.Duration
	Busy   float64
}

// LimenBudget is the most CPU per MiB the proxy and the worker together
// may use for the stream to reach share of direct throughput. At that rate
// every core's second, busy or not, carries at most 1/(share × direct)
// MiB: the machine may spend DirectMachine.PerMiB / (DirectMachine.Busy ×
// share) per MiB, of which the other processes spent what they did under
// Limen. It is an upper bound: it takes the Limen runs to keep every core
// busy. ok is false when the figures do not allow it.
func (s StreamPair) LimenBudget(share float64) (budget time.Duration, ok bool) {
	if s.DirectMachine.PerMiB <= 0 || s.LimenMachine.PerMiB <= 0 || s.DirectMachine.Busy <= 0 || share <= 0 {
		return 0, false
	}
	others := s.LimenMachine.PerMiB - s.ProxyCPU - s.WorkerCPU
	return time.Duration(float64(s.DirectMachine.PerMiB)/(s.DirectMachine.Busy*share)) - others, true
}

// Label names the stream in one line, as the goals do.
func (s StreamPair) Label() string {
	return fmt.Sprintf("%s, %s, %s", s.Name, s.Transport, s.Direction)
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// Goal is one goal of the issue and whether the run met it.
type Goal struct {
	Text, Figure string
	Met          bool
}

// The goals of #33 (hot paths, round 2).
const (
	goalGetAddedP50 = time.Millisecond
	goalGetAddedP99 = 3 * time.Millisecond
	goalListShare   = 0.85 // of direct throughput, LIST at c=16
	goalCPUShare    = 0.60 // proxy + worker CPU per GET over the API server's
	goalWatchBytes  = 32 << 10
	goalStreamShare = 0.85 // of direct, each stream but exec input
	goalPolicyMiss  = 10 * time.Microsecond
)

// Goals evaluates the goals of #33 against the run; where the run measured
// two careless hops (Hops, WatchMemory.TwoHops), each figure names them
// too: the floor of any two-hop gateway on this machine.
func (r *Results) Goals() []Goal {
	var goals []Goal
	for _, p := range r.Cells {
		if p.Concurrency != 1 || !strings.HasPrefix(p.Op, "GET") || p.Direct == nil || p.Limen == nil {
			continue
		}
		for _, q := range []struct {
			pct  float64
			goal time.Duration
		}{{50, goalGetAddedP50}, {99, goalGetAddedP99}} {
			d := p.Direct.Hist.Percentile(q.pct)
			added := p.Limen.Hist.Percentile(q.pct) - d
			fig := fmt.Sprintf("%+.3f ms", ms(added))
			var floors []string
			if p.Baseline != nil {
				floors = append(floors, fmt.Sprintf("one careless hop %+.3f", ms(p.Baseline.Hist.Percentile(q.pct)-d)))
			}
			if h := r.hop(p.Op, 1); h != nil {
				floors = append(floors, fmt.Sprintf("two careless hops %+.3f", ms(h.Two.Hist.Percentile(q.pct)-h.Direct.Hist.Percentile(q.pct))))
			}
			goals = append(goals, Goal{
				Text:   fmt.Sprintf("Added p%.0f latency at concurrency 1 ≤ %.0f ms (%s)", q.pct, ms(q.goal), p.Op),
				Figure: withFloors(fig, floors),
				Met:    added <= q.goal,
			})
		}
	}
	for _, p := range r.Cells {
		if p.Concurrency != 16 || !strings.HasPrefix(p.Op, "LIST") || p.Direct == nil || p.Limen == nil {
			continue
		}
		rt := ratio(p.Limen.Throughput(), p.Direct.Throughput())
		var floors []string
		if p.Baseline != nil {
			floors = append(floors, fmt.Sprintf("one careless hop %.2f", ratio(p.Baseline.Throughput(), p.Direct.Throughput())))
		}
		if h := r.hop(p.Op, 16); h != nil {
			floors = append(floors, fmt.Sprintf("two careless hops %.2f", ratio(h.Two.Throughput(), h.Direct.Throughput())))
		}
		goals = append(goals, Goal{
			Text:   fmt.Sprintf("Throughput at concurrency 16 ≥ %.2f of direct (%s)", goalListShare, p.Op),
			Figure: withFloors(fmt.Sprintf("%.2f of direct", rt), floors),
			Met:    rt >= goalListShare,
		})
	}
	for _, c := range r.CPU {
		if !strings.HasPrefix(c.Op, "GET") {
			continue
		}
		g := c.Gateway()
		floors := []string{fmt.Sprintf("one careless hop %.0f%%", 100*c.BaselineShare())}
		if h := r.hop(c.Op, 1); h != nil {
			floors = append(floors, fmt.Sprintf("two careless hops %.0f%% of the admin's", 100*h.TwoShare()))
		}
		goals = append(goals, Goal{
			Text:   fmt.Sprintf("Proxy + worker CPU per request ≤ %.0f%% of the API server's (%s)", 100*goalCPUShare, c.Op),
			Figure: withFloors(fmt.Sprintf("%.0f%%", 100*g), floors),
			Met:    c.LimenRequests > 0 && g <= goalCPUShare,
		})
	}
	if w := r.Watch; w.N > 0 && w.Err == "" {
		per := w.PerWatch(w.Proxy + w.Worker)
		var floors []string
		if w.TwoHops != 0 {
			floors = append(floors, fmt.Sprintf("one careless hop %.1f KiB", w.PerWatch(w.OneHop)/1024),
				fmt.Sprintf("two careless hops %.1f KiB", w.PerWatch(w.TwoHops)/1024))
		}
		goals = append(goals, Goal{
			Text:   fmt.Sprintf("≤ %d KiB per idle watch, proxy and worker together", goalWatchBytes>>10),
			Figure: withFloors(fmt.Sprintf("%.1f KiB", per/1024), floors),
			Met:    per <= goalWatchBytes,
		})
	}
	for _, s := range r.Streams {
		// The goals: exec output, kubectl cp both ways and
		// port-forward both ways (exec input is not one of them).
		if strings.HasPrefix(s.Name, "exec input") {
			continue
		}
		rt := ratio(s.Limen, s.Direct)
		var floors []string
		if s.OneHop > 0 {
			floors = append(floors, fmt.Sprintf("one careless hop %.0f%%", 100*ratio(s.OneHop, s.Direct)))
		}
		if s.TwoHops > 0 {
			floors = append(floors, fmt.Sprintf("two careless hops %.0f%%", 100*ratio(s.TwoHops, s.Direct)))
		}
		goals = append(goals, Goal{
			Text:   fmt.Sprintf("Stream throughput ≥ %.0f%% of direct (%s)", 100*goalStreamShare, s.Label()),
			Figure: withFloors(fmt.Sprintf("%.0f%%", 100*rt), floors),
			Met:    s.Err == "" && rt >= goalStreamShare,
		})
		if s.Recorded && strings.Contains(s.Name, "(text)") {
			goals = append(goals, Goal{
				Text:   "Recording ≤ 1.5× the output for text (" + s.Label() + ")",
				Figure: recordingFigure(s),
				Met:    s.Err == "" && s.RecordingRatio > 0 && s.RecordingRatio <= 1.5,
			})
		}
	}
	for _, p := range r.Policy {
		if p.Name != "BenchmarkGroupsMiss/index" {
			continue
		}
		cost := time.Duration(max(p.NsPerOp, p.CPUNsOp))
		goals = append(goals, Goal{
			Text:   fmt.Sprintf("A policy decision that misses the cache ≤ %d µs (%s)", goalPolicyMiss/time.Microsecond, p.Name),
			Figure: fmt.Sprintf("%.1f µs", float64(cost)/float64(time.Microsecond)),
			Met:    cost <= goalPolicyMiss,
		})
	}
	return goals
}

// hop returns the floor row of op at concurrency c, nil if not measured.
func (r *Results) hop(op string, c int) *HopRow {
	if r.Hops == nil {
		return nil
	}
	for i, h := range r.Hops.Rows {
		if h.Op == op && h.Concurrency == c && h.Direct != nil && h.Two != nil {
			return &r.Hops.Rows[i]
		}
	}
	return nil
}

// TwoShare is two careless hops' CPU per request over the API server's per
// request during the direct cell (admin, no impersonation).
func (h HopRow) TwoShare() float64 {
	return ratio(PerRequest(h.TwoCPU, h.Two), h.APIServerPerRequest())
}

// APIServerPerRequest is the API server's CPU per request of the direct
// cell, in nanoseconds.
func (h HopRow) APIServerPerRequest() float64 { return PerRequest(h.APIServer, h.Direct) }

// PerRequest is cpu over c's requests, in nanoseconds.
func PerRequest(cpu time.Duration, c *Cell) float64 {
	return float64(cpu) / float64(max(1, c.Hist.Len()))
}

// withFloors is a goal's figure followed by the floors it compares with.
func withFloors(fig string, floors []string) string {
	if len(floors) == 0 {
		return fig
	}
	return fig + " (" + strings.Join(floors, ", ") + ")"
}

// recordingFigure is a stream's recording size ratio for the report.
func recordingFigure(s StreamPair) string {
	switch {
	case !s.Recorded:
		return "not recorded"
	case s.RecordingRatio == 0:
		return "not measured"
	}
	return fmt.Sprintf("%.2f×", s.RecordingRatio)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
