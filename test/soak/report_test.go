package soak

import (
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// sample is one reading of every probe (proxy, worker) at one moment.
type sample struct {
	at    time.Time
	load  string
	open  int // streams open at that moment
	stats []Stats
}

func (s sample) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d streams open, load %s", s.open, s.load)
	for i, st := range s.stats {
		fmt.Fprintf(&b, "; %s RSS %s MiB heap %s MiB goroutines %d", probeNames[i], MiB(st.RSS), MiB(st.HeapInuse), st.Goroutines)
	}
	return b.String()
}

var probeNames = []string{"proxy", "worker"}

// The growth a run tolerates, per process, over the samples after the
// warm-up: the least-squares line's rise from the first to the last of
// them. Flat means within these; a leak of one goroutine a minute, or of a
// few KiB per ConfigMap event, passes them within the hour.
const (
	boundGoroutines = 20
	boundHeap       = 8 << 20
	boundRSS        = 24 << 20
)

// warmup is how much of the start the verdict leaves out: caches, pools and
// the first TLS sessions fill then.
func warmup(d time.Duration) time.Duration { return min(2*time.Minute, d/4) }

// metric is one figure of one process over the run.
type metric struct {
	name  string
	bound float64
	unit  func(float64) string
	value func(Stats) float64
}

var metrics = []metric{
	{"RSS", boundRSS, mib, func(s Stats) float64 { return float64(s.RSS) }},
	{"Go heap (HeapInuse after GC)", boundHeap, mib, func(s Stats) float64 { return float64(s.HeapInuse) }},
	{"goroutines", boundGoroutines, count, func(s Stats) float64 { return float64(s.Goroutines) }},
}

func mib(v float64) string   { return fmt.Sprintf("%+.2f MiB", v/(1<<20)) }
func count(v float64) string { return fmt.Sprintf("%+.1f", v) }

// verdict is what the samples say of one metric of one process.
type verdict struct {
	process, metric string
	first, last     float64 // of the fit window
	perHour, growth float64 // the fit's slope, and its rise over the window
	bound           float64
	unit            func(float64) string
}

func (v verdict) growing() bool { return v.growth > v.bound }

func (v verdict) String() string {
	word := "flat"
	if v.growing() {
		word = "GROWING"
	}
	return fmt.Sprintf("%s %s: %s — fitted rise %s over the window (bound %s), slope %s per hour",
		v.process, v.metric, word, v.unit(v.growth), v.unit(v.bound), v.unit(v.perHour))
}

// verdicts fits a line to each metric of each process over the samples
// from warm-up on.
func verdicts(samples []sample, started time.Time, warm time.Duration) []verdict {
	var win []sample
	for _, s := range samples {
		if s.at.Sub(started) >= warm && len(s.stats) == len(probeNames) {
			win = append(win, s)
		}
	}
	if len(win) < 2 {
		return nil
	}
	span := win[len(win)-1].at.Sub(win[0].at).Hours()
	var out []verdict
	for pi, p := range probeNames {
		for _, m := range metrics {
			xs := make([]float64, len(win))
			ys := make([]float64, len(win))
			for i, s := range win {
				xs[i] = s.at.Sub(started).Hours()
				ys[i] = m.value(s.stats[pi])
			}
			slope := Slope(xs, ys)
			out = append(out, verdict{process: p, metric: m.name, first: ys[0], last: ys[len(ys)-1],
				perHour: slope, growth: slope * span, bound: m.bound, unit: m.unit})
		}
	}
	return out
}

// report is the markdown report of a run and the failures it found.
type report struct {
	text     string
	failures []string
}

func (s *soak) report(started time.Time) report {
	s.mu.Lock()
	defer s.mu.Unlock()
	var r report
	var b strings.Builder
	end := started.Add(s.cfg.duration)
	if len(s.samples) > 0 {
		end = s.samples[len(s.samples)-1].at
	}
	fmt.Fprintf(&b, "# Soak: streams held open through Limen\n\n")
	fmt.Fprintf(&b, "%s to %s UTC (%s), commit %s, %s; load average (1, 5, 15 min) %s at the start, %s at the end.\n\n",
		started.UTC().Format("2006-01-02 15:04"), end.UTC().Format("15:04"), s.cfg.duration, s.commit, machine(),
		first(s.samples).load, last(s.samples).load)
	fmt.Fprintf(&b, "One proxy and one worker (test/gatewaytest) before test/cluster's kube-apiserver; the user alice through Limen.\n")
	fmt.Fprintf(&b, "The API server runs without `--min-request-timeout`, so its default of %s applies: a watch that asks no `timeoutSeconds` "+
		"is ended by the server after a random %s–%s; one that asks it, after that. Such ends are Kubernetes' own, listed apart, and the stream is resumed "+
		"(client-go from its last resourceVersion, as a reflector does; kubectl started again). Every other end is a drop.\n\n",
		minRequestTimeout, minRequestTimeout, 2*minRequestTimeout)

	fmt.Fprintf(&b, "## Streams\n\n| stream | kind | opened | events seen | Kubernetes' own ends | drops |\n|---|---|---|---|---|---|\n")
	for _, st := range s.streams {
		st.mu.Lock()
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d |\n", st.name, st.kind, st.opens, st.seen, len(st.timeouts), len(st.drops))
		for _, d := range st.drops {
			r.failures = append(r.failures, fmt.Sprintf("%s dropped: %s", st.name, d))
		}
		st.mu.Unlock()
	}
	var ends []string
	for _, st := range s.streams {
		for _, e := range st.timeouts {
			ends = append(ends, fmt.Sprintf("* %s: %s", st.name, e))
		}
	}
	if len(ends) > 0 {
		fmt.Fprintf(&b, "\nKubernetes' own ends:\n\n%s\n", strings.Join(ends, "\n"))
	}
	tr := s.traffic
	fmt.Fprintf(&b, "\n## Traffic\n\n* ConfigMap updates through Limen (every %s): %d, %d failed\n", changeEvery, tr.changes, tr.changeFails)
	fmt.Fprintf(&b, "* echo rounds over the port-forward (every %s, on a held and on a fresh connection): %d, %d failed\n", echoEvery, tr.echoes, tr.echoFails)
	fmt.Fprintf(&b, "* GETs through Limen (every %s): %d, %d failed\n", echoEvery, tr.gets, tr.getFails)
	r.failures = append(r.failures, tr.failures...)

	fmt.Fprintf(&b, "\n## Proxy and worker over time\n\nRSS from /proc/PID/status, heap (HeapInuse right after a forced GC) and goroutines from each process's pprof (--debug-listen), every %s.\n\n", s.cfg.sample)
	fmt.Fprintf(&b, "| t | open streams | proxy RSS MiB | proxy heap MiB | proxy goroutines | worker RSS MiB | worker heap MiB | worker goroutines | load avg |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, sm := range s.samples {
		fmt.Fprintf(&b, "| %s | %d |", sm.at.Sub(started).Round(time.Second), sm.open)
		for _, st := range sm.stats {
			fmt.Fprintf(&b, " %s | %s | %d |", MiB(st.RSS), MiB(st.HeapInuse), st.Goroutines)
		}
		fmt.Fprintf(&b, " %s |\n", sm.load)
	}
	warm := warmup(s.cfg.duration)
	fmt.Fprintf(&b, "\n## Verdict\n\nA line fitted (least squares) to the samples from t=%s on; its rise over that window against the bound.\n\n", warm)
	vs := verdicts(s.samples, started, warm)
	if len(vs) == 0 {
		r.failures = append(r.failures, "fewer than two samples after the warm-up: no verdict on memory")
	}
	for _, v := range vs {
		fmt.Fprintf(&b, "* %s\n", v)
		if v.growing() {
			r.failures = append(r.failures, v.String())
		}
	}
	if len(r.failures) == 0 {
		fmt.Fprintf(&b, "\n**PASS**: no stream dropped, no traffic failed, memory and goroutines flat.\n")
	} else {
		fmt.Fprintf(&b, "\n**FAIL**:\n\n")
		for _, f := range r.failures {
			fmt.Fprintf(&b, "* %s\n", f)
		}
	}
	r.text = b.String()
	return r
}

func first(s []sample) sample {
	if len(s) == 0 {
		return sample{load: "?"}
	}
	return s[0]
}

func last(s []sample) sample {
	if len(s) == 0 {
		return sample{load: "?"}
	}
	return s[len(s)-1]
}

func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, _ := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); len(st) > 0 {
		c += " (with uncommitted changes)"
	}
	return c
}

func machine() string {
	out, err := exec.Command("nproc").Output()
	if err != nil {
		return "cores unknown"
	}
	return strings.TrimSpace(string(out)) + " cores"
}
