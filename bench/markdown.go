package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// table is a Markdown table of figures: direct, the one-hop baseline,
// Limen, and the ratios of the baseline's and Limen's to direct.
type table struct{ rows [][6]string }

func (t *table) add(figure, direct, baseline, limen, baseRatio, limenRatio string) {
	t.rows = append(t.rows, [6]string{figure, direct, baseline, limen, baseRatio, limenRatio})
}

// three adds a row of all three paths, with their ratios to direct.
func (t *table) three(figure, format string, direct, baseline, limen float64) {
	t.add(figure, fmt.Sprintf(format, direct), fmt.Sprintf(format, baseline), fmt.Sprintf(format, limen),
		times(ratio(baseline, direct)), times(ratio(limen, direct)))
}

// pair adds a row the baseline has no figure for; its ratio is limen/direct.
func (t *table) pair(figure, format string, direct, limen float64) {
	t.add(figure, fmt.Sprintf(format, direct), "—", fmt.Sprintf(format, limen), "—", times(ratio(limen, direct)))
}

func (t *table) write(w io.Writer) {
	fmt.Fprintln(w, "| Figure | Direct | Baseline | Limen | Baseline ÷ direct | Limen ÷ direct |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	for _, r := range t.rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", r[0], r[1], r[2], r[3], r[4], r[5])
	}
}

func times(r float64) string {
	if r == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", r)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// Markdown writes the report: the run, the goals, one table of figures, and
// the notes.
func (r *Results) Markdown(w io.Writer) {
	fmt.Fprintf(w, "# Limen benchmark results\n\n")
	fmt.Fprintf(w, "Written by `limen-bench` (bench/cmd/limen-bench); regenerate with `make bench` (full) or `make bench-quick`. Do not edit by hand.\n\n")
	fmt.Fprintf(w, "* **Run**: %s (%s mode), %s\n", r.Started.UTC().Format(time.RFC3339), r.Mode, r.Duration.Round(time.Second))
	fmt.Fprintf(w, "* **Command**: `%s`\n", r.Command)
	fmt.Fprintf(w, "* **Commit**: `%s`\n", r.Commit)
	fmt.Fprintf(w, "* **Machine**: %s, %d cores, %s\n", r.CPUModel, r.Cores, r.GoVersion)
	fmt.Fprintf(w, "* **Load average** (1/5/15 min): at start %s, at end %s — the machine is shared; neighbours' load distorts the figures\n", r.LoadStart, r.LoadEnd)
	fmt.Fprintf(w, "* **kubectl** (exec, port-forward): %s\n", r.Kubectl)
	fmt.Fprintf(w, "* **Recording**: %s\n", r.Recording)
	fmt.Fprintf(w, "* **Counts**: %d requests per latency cell; %d idle watches; streams of %s, median of %d runs\n\n",
		r.Requests, r.Watch.N, mib(r.StreamSize), r.StreamRuns)
	fmt.Fprintf(w, "**Direct** is the admin kubeconfig (client certificate, `system:masters`) straight to kube-apiserver. "+
		"**Limen** is alice's kubeconfig (exec-plugin client certificate) to `limen proxy` → yamux tunnel → `limen worker` → "+
		"the same kube-apiserver, impersonating alice with groups limen:edit and limen:view. **Baseline** is a careless one-hop "+
		"proxy measured in the same run: a bare `httputil.ReverseProxy` (`limen-bench serve-baseline`, its own process), TLS on "+
		"both sides, sending every request with the worker's ServiceAccount token and the same Impersonate-User and "+
		"Impersonate-Group headers; it checks, signs and audits nothing. All three use client-go's transport "+
		"(`rest.HTTPClientFor`, HTTP/2) with raw GETs; latency runs from sending the request to reading the last body byte.\n\n")
	fmt.Fprintf(w, "How to read it: the API server skips impersonation checks and RBAC for `system:masters`, so part of its "+
		"extra CPU under Limen is the price of impersonating a non-admin, not of Limen's processes. CPU is utime+stime from "+
		"`/proc/PID/stat` over all three concurrencies of an operation; the load generator shares the same cores. "+
		"Memory per watch is each process's VmRSS delta a few seconds after the watches opened, over their count (Go's GC "+
		"makes small deltas noisy). Stream rates run from the first byte to the last, so kubectl's start is left out, except kubectl cp's, which shows no first byte: its rate is over the whole kubectl run, direct and Limen alike.\n\n")

	fmt.Fprintf(w, "## Goals\n\n| Goal | Figure | Met |\n|---|---:|:---:|\n")
	for _, g := range r.Goals() {
		met := "**not met**"
		if g.Met {
			met = "met"
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", g.Text, g.Figure, met)
	}
	if len(r.Profiles) > 0 {
		fmt.Fprintf(w, "\n## Where the time goes\n\nProfiles of the proxy and worker taken because a goal is not met.\n")
		for _, p := range r.Profiles {
			fmt.Fprintf(w, "\n### %s\n\n```\n%s\n```\n", p.Title, strings.TrimSpace(p.Text))
		}
	}
	fmt.Fprintf(w, "\n## Figures\n\n")
	var t table
	r.latencyRows(&t)
	r.resourceRows(&t)
	t.write(w)
	r.tracingTable(w)
	r.hopTable(w)
	r.streamTable(w)
	r.streamBudgetTable(w)
	if len(r.Notes) > 0 {
		fmt.Fprintf(w, "\n## Notes\n\nWith the warnings the proxy and worker logged; some come from the harness closing watches and ending a load mid-request.\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(w, "* %s\n", n)
		}
	}
}

func (r *Results) latencyRows(t *table) {
	for _, p := range r.Cells {
		if p.Direct == nil || p.Limen == nil {
			continue
		}
		base := p.Baseline
		if base == nil {
			base = &Cell{}
		}
		for _, q := range []float64{50, 90, 99} {
			t.three(fmt.Sprintf("%s, c=%d, p%.0f latency (ms)", p.Op, p.Concurrency, q), "%.3f",
				ms(p.Direct.Hist.Percentile(q)), ms(base.Hist.Percentile(q)), ms(p.Limen.Hist.Percentile(q)))
		}
		t.three(fmt.Sprintf("%s, c=%d, throughput (req/s)", p.Op, p.Concurrency), "%.0f",
			p.Direct.Throughput(), base.Throughput(), p.Limen.Throughput())
		if p.Direct.Errors+base.Errors+p.Limen.Errors > 0 {
			t.add(fmt.Sprintf("%s, c=%d, failed requests", p.Op, p.Concurrency),
				fmt.Sprint(p.Direct.Errors), fmt.Sprint(base.Errors), fmt.Sprint(p.Limen.Errors), "", "")
		}
	}
}

func (r *Results) resourceRows(t *table) {
	for _, c := range r.CPU {
		t.three("CPU s per 1,000 requests, API server ("+c.Op+")", "%.3f",
			PerThousand(c.APIServerDirect, c.DirectRequests), PerThousand(c.APIServerBaseline, c.BaselineRequests),
			PerThousand(c.APIServerLimen, c.LimenRequests))
		t.add("CPU s per 1,000 requests, the gateway's processes ("+c.Op+"); ratio to the API server's", "—",
			fmt.Sprintf("%.3f", PerThousand(c.Baseline, c.BaselineRequests)),
			fmt.Sprintf("%.3f (proxy %.3f, worker %.3f)", PerThousand(c.Proxy+c.Worker, c.LimenRequests),
				PerThousand(c.Proxy, c.LimenRequests), PerThousand(c.Worker, c.LimenRequests)),
			fmt.Sprintf("%.0f%%", 100*c.BaselineShare()), fmt.Sprintf("%.0f%%", 100*c.Gateway()))
	}
	m := r.Memory
	t.add("RSS idle: proxy / worker (API server)", mib(m.APIServerIdle), "—", mib(m.ProxyIdle)+" / "+mib(m.WorkerIdle), "", "")
	t.add("RSS peak under load: proxy / worker (API server)", mib(m.APIServerLoad), "—", mib(m.ProxyLoad)+" / "+mib(m.WorkerLoad), "", "")
	if w := r.Watch; w.N > 0 {
		if w.Err != "" {
			t.add(fmt.Sprintf("%d idle watches", w.N), "failed", "—", "failed", "", w.Err)
		} else {
			kib := func(d int64) string {
				if d < 0 {
					return "n/a (RSS fell: GC)"
				}
				return fmt.Sprintf("%.1f KiB", w.PerWatch(d)/1024)
			}
			t.add(fmt.Sprintf("Memory per idle watch (%d watches), API server", w.N), kib(w.APIServerDirect), "—", kib(w.APIServerLimen), "", "")
			t.add("Memory per idle watch, proxy / worker / both", "—", "—",
				kib(w.Proxy)+" / "+kib(w.Worker)+" / "+kib(w.Proxy+w.Worker), "", "")
			if w.OneHop != 0 || w.TwoHops != 0 {
				t.add("Memory per idle watch, one careless hop / two careless hops (both processes)", "—",
					kib(w.OneHop)+" / "+kib(w.TwoHops), "—", "", "")
			}
		}
	}
	for _, p := range r.Policy {
		cpu := ""
		if p.CPUNsOp > 0 {
			cpu = fmt.Sprintf(", %.1f µs CPU", p.CPUNsOp/1000)
		}
		t.add("Policy decision "+strings.TrimPrefix(p.Name, "Benchmark"), "—", "—",
			fmt.Sprintf("%.1f µs%s, %.0f allocs", p.NsPerOp/1000, cpu, p.AllocsOp), "", "")
	}
}

// tracingTable compares the request path with tracing off and on.
func (r *Results) tracingTable(w io.Writer) {
	tc := r.Tracing
	if tc == nil || tc.Off == nil || tc.On == nil {
		return
	}
	fmt.Fprintf(w, "\n## Tracing\n\nGET one ConfigMap at concurrency 1, %d requests, through Limen with tracing off and through a second "+
		"Limen (its own proxy and worker) with tracing on at 100%% sampling, exporting every span over OTLP/gRPC to a receiver "+
		"in the bench's process, one after the other.\n\n", tc.Off.Hist.Len())
	fmt.Fprintln(w, "| Figure | Tracing off | Tracing on (100%) | On ÷ off |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	for _, q := range []float64{50, 99} {
		off, on := ms(tc.Off.Hist.Percentile(q)), ms(tc.On.Hist.Percentile(q))
		fmt.Fprintf(w, "| p%.0f latency (ms) | %.3f | %.3f | %s |\n", q, off, on, times(ratio(on, off)))
	}
	off, on := PerThousand(tc.OffCPU, tc.Off.Hist.Len()), PerThousand(tc.OnCPU, tc.On.Hist.Len())
	fmt.Fprintf(w, "| proxy + worker CPU s per 1,000 requests | %.3f | %.3f | %s |\n", off, on, times(ratio(on, off)))
}

// streamTable writes one row per stream: transport, direction, direct and
// Limen in the same run, their ratio, and the recording's size ratio.
func (r *Results) streamTable(w io.Writer) {
	if len(r.Streams) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## Streams\n\n%s per run, median of %d runs, MiB/s from the first byte to the last (kubectl cp: over the whole kubectl run). "+
		"\"Down\" is from the pod to kubectl, \"up\" from kubectl to the pod. The recording ratio is the bytes of the recordings "+
		"the Limen runs left over the bytes of output they carried (stdin and port-forward are counted and audited, not recorded). "+
		"CPU is the proxy's and the worker's CPU time per MiB during the Limen runs (a recording's upload may run on into the next row), "+
		"and the careless hops' own processes' during theirs (two hops: both processes). "+
		"The careless hops (the baseline, and a second one in front of it) carry the same streams and record nothing: the floor of a "+
		"one- and a two-hop gateway on this machine.\n\n",
		mib(r.StreamSize), r.StreamRuns)
	fmt.Fprintln(w, "| Stream | Transport | Direction | Direct | One careless hop (÷ direct) | Two careless hops (÷ direct) | Limen | Limen ÷ direct | Recording ÷ output | CPU per MiB: proxy, worker | CPU per MiB: one, two careless hops |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range r.Streams {
		limen, rt := fmt.Sprintf("%.1f", s.Limen), times(ratio(s.Limen, s.Direct))
		if s.Err != "" {
			limen, rt = limen+" (error: "+s.Err+")", "—"
		}
		cpu := "—"
		if s.ProxyCPU > 0 || s.WorkerCPU > 0 {
			cpu = fmt.Sprintf("%.1f ms, %.1f ms", ms(s.ProxyCPU), ms(s.WorkerCPU))
		}
		hopCPU := "—"
		if s.OneHopCPU > 0 || s.TwoHopsCPU > 0 {
			hopCPU = fmt.Sprintf("%.1f ms, %.1f ms", ms(s.OneHopCPU), ms(s.TwoHopsCPU))
		}
		hop := func(rate float64) string {
			if rate == 0 {
				return "—"
			}
			return fmt.Sprintf("%.1f (%s)", rate, times(ratio(rate, s.Direct)))
		}
		one, two := hop(s.OneHop), hop(s.TwoHops)
		if s.HopErr != "" {
			two += " (error: " + s.HopErr + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.1f | %s | %s | %s | %s | %s | %s | %s |\n",
			s.Name, s.Transport, s.Direction, s.Direct, one, two, limen, rt, recordingFigure(s), cpu, hopCPU)
	}
}

// streamBudgetTable writes, per stream, the whole machine's CPU during the
// direct and the Limen runs, and what that leaves the proxy and the worker
// for 0.85 of direct: when the direct runs already keep every core busy,
// throughput is the cores over the CPU per MiB, so Limen's share of direct
// can only rise by cutting the CPU it adds per MiB.
func (r *Results) streamBudgetTable(w io.Writer) {
	var rows []StreamPair
	for _, s := range r.Streams {
		if s.DirectMachine.PerMiB > 0 && s.LimenMachine.PerMiB > 0 {
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n### The machine's CPU per MiB\n\nThe whole machine's CPU (every process, the bench's and kubectl's included; /proc/stat) "+
		"over the MiB carried in each side's runs, and how busy its %d cores were. At 0.85 of direct throughput each second of "+
		"the cores carries at most 1 ÷ (0.85 × direct) MiB, so the machine may spend at most direct's CPU per MiB ÷ (its busy share × 0.85); "+
		"the budget is that less what the other processes spent under Limen, an upper bound that takes Limen's runs to keep every core busy.\n\n", r.Cores)
	fmt.Fprintln(w, "| Stream | Transport | Direction | Direct: machine CPU per MiB, busy | Limen: machine CPU per MiB, busy | Proxy + worker per MiB | Their budget for 0.85 of direct |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|")
	for _, s := range rows {
		budget := "—"
		if b, ok := s.LimenBudget(0.85); ok {
			budget = fmt.Sprintf("%.1f ms", ms(b))
			if b <= 0 {
				budget = fmt.Sprintf("none (%.1f ms): the other processes alone spend more", ms(b))
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.1f ms, %.0f%% | %.1f ms, %.0f%% | %.1f ms | %s |\n", s.Name, s.Transport, s.Direction,
			ms(s.DirectMachine.PerMiB), 100*s.DirectMachine.Busy, ms(s.LimenMachine.PerMiB), 100*s.LimenMachine.Busy,
			ms(s.ProxyCPU+s.WorkerCPU), budget)
	}
}

// hopTable writes the floor section: Limen beside one and two careless
// hops, each figure from the same run.
func (r *Results) hopTable(w io.Writer) {
	if r.Hops == nil || len(r.Hops.Rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\n## Two careless hops\n\nThe floor of a two-hop gateway, measured in the same run: the baseline (one careless hop) and a second "+
		"careless proxy in front of it (two hops: client → careless proxy → careless proxy → API server, TLS and HTTP/2 on each), "+
		"then Limen, one after the other. Two careless hops pay for a second process and a second TLS connection, as Limen's "+
		"worker does, and check, sign, record and audit nothing. Added latency is over direct; CPU is the path's own processes' "+
		"per request, and its share of the API server's during the direct cell.")
	fmt.Fprintln(w, "\n| Figure | Direct | One careless hop | Two careless hops | Limen |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|")
	for _, h := range r.Hops.Rows {
		if h.Direct == nil || h.One == nil || h.Two == nil || h.Via == nil {
			continue
		}
		name := fmt.Sprintf("%s, c=%d", h.Op, h.Concurrency)
		for _, q := range []float64{50, 99} {
			d := h.Direct.Hist.Percentile(q)
			added := func(c *Cell) string { return fmt.Sprintf("%+.3f", ms(c.Hist.Percentile(q)-d)) }
			fmt.Fprintf(w, "| %s: p%.0f, ms (added) | %.3f | %s | %s | %s |\n", name, q, ms(d), added(h.One), added(h.Two), added(h.Via))
		}
		tp := func(c *Cell) string {
			return fmt.Sprintf("%.0f (%s)", c.Throughput(), times(ratio(c.Throughput(), h.Direct.Throughput())))
		}
		fmt.Fprintf(w, "| %s: requests/s (of direct) | %.0f | %s | %s | %s |\n", name, h.Direct.Throughput(), tp(h.One), tp(h.Two), tp(h.Via))
		api := h.APIServerPerRequest()
		per := func(d time.Duration, c *Cell) string {
			v := PerRequest(d, c)
			share := "—"
			if api > 0 {
				share = fmt.Sprintf("%.0f%%", 100*v/api)
			}
			return fmt.Sprintf("%.3f (%s)", v/float64(time.Millisecond), share)
		}
		fmt.Fprintf(w, "| %s: CPU ms per request (of the API server's) | %.3f | %s | %s | %s |\n", name, api/float64(time.Millisecond),
			per(h.OneCPU, h.One), per(h.TwoCPU, h.Two), per(h.ViaCPU, h.Via))
	}
}
