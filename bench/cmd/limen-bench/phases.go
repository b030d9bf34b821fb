package main

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/limenhq/limen/bench"
)

// measure runs every phase in turn and fills in r.
func measure(ctx context.Context, c config, s *setup, r *bench.Results) error {
	for _, t := range []target{s.direct, s.baseline, s.limen} {
		if _, err := bench.Load(ctx, t.client, t.base+getPath, 4, 100); err != nil {
			return fmt.Errorf("warm-up %s: %w", t.name, err)
		}
	}
	if c.only == "streams" {
		streams(ctx, c, s, r)
		r.Recording = recordingState(s)
		r.Notes = append(r.Notes, gatewayWarnings(s)...)
		return ctx.Err()
	}
	time.Sleep(2 * time.Second) // let the warm-up garbage be collected before the idle reading
	r.Memory.ProxyIdle, r.Memory.WorkerIdle, r.Memory.APIServerIdle = rss(s.proxy), rss(s.worker), rss(s.apiserver)
	if err := latency(ctx, c, s, r); err != nil {
		return err
	}
	if err := tracingCost(ctx, c, s, r); err != nil {
		return err
	}
	if err := hopFloor(ctx, c, s, r); err != nil {
		return err
	}
	watchProf := watches(ctx, c, s, r)
	// Profile before the streams: their recordings upload for a while after.
	if c.profile && slices.ContainsFunc(r.Goals(), func(g bench.Goal) bool { return !g.Met }) {
		diagnose(ctx, c, s, r)
		if watchProf != nil {
			r.Profiles = append(r.Profiles, *watchProf)
		}
	}
	streams(ctx, c, s, r)
	r.Recording = recordingState(s)
	r.Notes = append(r.Notes, gatewayWarnings(s)...)
	return ctx.Err()
}

// gatewayWarnings returns the distinct warnings the proxy and worker logged
// during the run, for the notes: they explain failed figures. Some come from
// the harness itself closing watches and ending a load mid-request.
func gatewayWarnings(s *setup) []string {
	var notes []string
	seen := map[string]bool{}
	for _, name := range []string{"proxy", "worker"} {
		b, err := os.ReadFile(filepath.Join(s.env.Dir, name+".log"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.Contains(l, "level=WARN") && !strings.Contains(l, "level=ERROR") ||
				strings.Contains(l, "context canceled") { // the harness ending a phase's requests
				continue
			}
			if _, rest, ok := strings.Cut(l, " level="); ok { // drop the time: identical warnings collapse
				l = "level=" + rest
			}
			if !seen[name+l] && len(notes) < 8 {
				seen[name+l] = true
				notes = append(notes, fmt.Sprintf("%s log: `%s`", name, l))
			}
		}
	}
	return notes
}

const (
	getPath  = "/api/v1/namespaces/" + nsGet + "/configmaps/one"
	listPath = "/api/v1/namespaces/" + nsList + "/configmaps"
)

// latency runs each (operation, concurrency) cell direct, through the
// baseline and through Limen, one after the other, reading the CPU the
// processes spent on each, and the peak memory.
func latency(ctx context.Context, c config, s *setup, r *bench.Results) error {
	peak := bench.SamplePeakRSS(ctx, 100*time.Millisecond, s.proxy, s.worker, s.apiserver)
	defer func() {
		p := peak.Stop()
		r.Memory.ProxyLoad, r.Memory.WorkerLoad, r.Memory.APIServerLoad = p[s.proxy], p[s.worker], p[s.apiserver]
	}()
	for _, op := range []struct{ name, path string }{
		{"GET one ConfigMap", getPath},
		{fmt.Sprintf("LIST %d ConfigMaps", listSize), listPath},
	} {
		use := bench.CPUUse{Op: op.name}
		for _, conc := range []int{1, 16, 64} {
			pair := bench.CellPair{Op: op.name, Concurrency: conc}
			for _, t := range []target{s.direct, s.baseline, s.limen} {
				before := cpu(s)
				cell, err := bench.Load(ctx, t.client, t.base+op.path, conc, c.requests)
				if err != nil {
					return fmt.Errorf("%s %s c=%d: %w", t.name, op.name, conc, err)
				}
				d := cpu(s).minus(before)
				switch t.name {
				case "direct":
					pair.Direct, use.DirectRequests, use.APIServerDirect = cell, use.DirectRequests+cell.Hist.Len(), use.APIServerDirect+d.apiserver
				case "baseline":
					pair.Baseline, use.BaselineRequests = cell, use.BaselineRequests+cell.Hist.Len()
					use.APIServerBaseline, use.Baseline = use.APIServerBaseline+d.apiserver, use.Baseline+d.baseline
				default:
					pair.Limen, use.LimenRequests, use.APIServerLimen = cell, use.LimenRequests+cell.Hist.Len(), use.APIServerLimen+d.apiserver
					use.Proxy, use.Worker = use.Proxy+d.proxy, use.Worker+d.worker
				}
				progress(os.Stderr, "%-8s %s c=%-2d: p50 %v p99 %v, %.0f req/s, %d failed%s", t.name, op.name, conc,
					cell.Hist.Percentile(50).Round(time.Microsecond), cell.Hist.Percentile(99).Round(time.Microsecond),
					cell.Throughput(), cell.Errors, firstErr(cell.FirstErr))
			}
			r.Cells = append(r.Cells, pair)
		}
		r.CPU = append(r.CPU, use)
	}
	return nil
}

// tracingCost runs GET one ConfigMap at concurrency 1 through Limen with
// tracing off and through the second Limen with tracing on at 100%, one
// after the other, with each pair of processes' CPU.
func tracingCost(ctx context.Context, c config, s *setup, r *bench.Results) error {
	tc := &bench.TracingCost{}
	for _, t := range []struct {
		target      target
		proxy, wrkr int
		cell        **bench.Cell
		cpu         *time.Duration
	}{
		{s.limen, s.proxy, s.worker, &tc.Off, &tc.OffCPU},
		{s.traced, s.tracedProxy, s.tracedWorker, &tc.On, &tc.OnCPU},
	} {
		p0, _ := bench.CPUTime(t.proxy)
		w0, _ := bench.CPUTime(t.wrkr)
		cell, err := bench.Load(ctx, t.target.client, t.target.base+getPath, 1, c.requests)
		if err != nil {
			return fmt.Errorf("%s GET c=1: %w", t.target.name, err)
		}
		p1, _ := bench.CPUTime(t.proxy)
		w1, _ := bench.CPUTime(t.wrkr)
		*t.cell, *t.cpu = cell, (p1-p0)+(w1-w0)
		progress(os.Stderr, "%-18s GET c=1: p50 %v p99 %v, gateway CPU %v", t.target.name,
			cell.Hist.Percentile(50).Round(time.Microsecond), cell.Hist.Percentile(99).Round(time.Microsecond), *t.cpu)
	}
	r.Tracing = tc
	return nil
}

// hopFloor runs GET one ConfigMap at concurrency 1 and the LIST at 16
// direct, through one and two careless hops and through Limen, one after
// the other, with each path's CPU (bench.HopFloor).
func hopFloor(ctx context.Context, c config, s *setup, r *bench.Results) error {
	hf := &bench.HopFloor{}
	for _, op := range []struct {
		name, path string
		conc       int
	}{
		{"GET one ConfigMap", getPath, 1},
		{fmt.Sprintf("LIST %d ConfigMaps", listSize), listPath, 16},
	} {
		row := bench.HopRow{Op: op.name, Concurrency: op.conc}
		for _, t := range []target{s.direct, s.baseline, s.twoHops, s.limen} {
			pids := map[string][]int{"direct": {s.apiserver}, "baseline": {s.baselinePID},
				s.twoHops.name: {s.baselinePID, s.twoHopsPID}, "limen": {s.proxy, s.worker}}[t.name]
			before := cpuOf(pids)
			cell, err := bench.Load(ctx, t.client, t.base+op.path, op.conc, c.requests)
			if err != nil {
				return fmt.Errorf("%s %s c=%d: %w", t.name, op.name, op.conc, err)
			}
			used := cpuOf(pids) - before
			switch t.name {
			case "direct":
				row.Direct, row.APIServer = cell, used
			case "baseline":
				row.One, row.OneCPU = cell, used
			case s.twoHops.name:
				row.Two, row.TwoCPU = cell, used
			default:
				row.Via, row.ViaCPU = cell, used
			}
			progress(os.Stderr, "%-9s %s c=%-2d: p50 %v p99 %v, %.0f req/s, %d failed%s", t.name, op.name, op.conc,
				cell.Hist.Percentile(50).Round(time.Microsecond), cell.Hist.Percentile(99).Round(time.Microsecond),
				cell.Throughput(), cell.Errors, firstErr(cell.FirstErr))
		}
		hf.Rows = append(hf.Rows, row)
	}
	r.Hops = hf
	return nil
}

// cpuOf is the CPU time the processes pids used so far, together.
func cpuOf(pids []int) time.Duration {
	var sum time.Duration
	for _, pid := range pids {
		d, _ := bench.CPUTime(pid)
		sum += d
	}
	return sum
}

func firstErr(err error) string {
	if err == nil {
		return ""
	}
	return " (first: " + err.Error() + ")"
}

// cpuTimes is the CPU time used so far by the measured processes.
type cpuTimes struct{ apiserver, proxy, worker, baseline time.Duration }

func cpu(s *setup) cpuTimes {
	read := func(pid int) time.Duration {
		d, _ := bench.CPUTime(pid)
		return d
	}
	return cpuTimes{read(s.apiserver), read(s.proxy), read(s.worker), read(s.baselinePID)}
}

func (a cpuTimes) minus(b cpuTimes) cpuTimes {
	return cpuTimes{a.apiserver - b.apiserver, a.proxy - b.proxy, a.worker - b.worker, a.baseline - b.baseline}
}

func mib(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }

func rss(pid int) int64 {
	v, _ := bench.RSS(pid)
	return v
}

// watches opens c.watches idle watches direct, then through Limen, and
// reads the memory they add to each process. With c.profile it returns what
// the heap and goroutine profiles say the Limen watches added.
func watches(ctx context.Context, c config, s *setup, r *bench.Results) (prof *bench.Profile) {
	r.Watch.N = c.watches
	url := "/api/v1/namespaces/" + nsWatch + "/configmaps?watch=1&timeoutSeconds=1800"
	for _, t := range []target{s.direct, s.baseline, s.twoHops, s.limen} {
		time.Sleep(2 * time.Second)
		heap := c.profile && t.name == "limen"
		var before heapSnap
		if heap {
			before, heap = snapOrNote(ctx, s, r, "watch-before")
		}
		a0, p0, w0 := rss(s.apiserver), rss(s.proxy), rss(s.worker)
		b0, f0 := rss(s.baselinePID), rss(s.twoHopsPID)
		ws, err := bench.OpenWatches(ctx, t.client, t.base+url, c.watches)
		if err != nil {
			r.Watch.Err = fmt.Sprintf("%s: %v", t.name, err)
			progress(os.Stderr, "watches: %s", r.Watch.Err)
			return nil
		}
		time.Sleep(3 * time.Second) // the watches are idle: let the processes settle
		a1, p1, w1 := rss(s.apiserver), rss(s.proxy), rss(s.worker)
		b1, f1 := rss(s.baselinePID), rss(s.twoHopsPID)
		if heap {
			prof = watchProfileOrNote(ctx, s, r, before, c.watches)
		}
		ws.Close()
		switch t.name {
		case "direct":
			r.Watch.APIServerDirect = a1 - a0
		case "baseline":
			r.Watch.OneHop = b1 - b0
		case s.twoHops.name:
			r.Watch.TwoHops = (b1 - b0) + (f1 - f0)
		default:
			r.Watch.APIServerLimen, r.Watch.Proxy, r.Watch.Worker = a1-a0, p1-p0, w1-w0
		}
		progress(os.Stderr, "%-9s %d idle watches: API server %+d KiB, proxy %+d KiB, worker %+d KiB, careless hops %+d KiB and %+d KiB",
			t.name, c.watches, (a1-a0)>>10, (p1-p0)>>10, (w1-w0)>>10, (b1-b0)>>10, (f1-f0)>>10)
	}
	return prof
}

// streamKind is one row of the stream table: what moves, over which
// transport, which way.
type streamKind struct {
	name, transport, direction string
	env                        []string
	profile                    string // pprof file prefix: profile the Limen runs of this row
}

// streamKinds are the rows: exec and port-forward, down and up, over every
// transport kubectl speaks for them.
var streamKinds = []streamKind{
	{"exec output (text)", "WebSocket", "down", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=true"}, "stream-exec-ws"},
	{"exec output (binary)", "WebSocket", "down", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=true"}, ""},
	{"exec output (text)", "SPDY", "down", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false"}, ""},
	{"exec input", "WebSocket", "up", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=true"}, ""},
	{"exec input", "SPDY", "up", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false"}, ""},
	{"cp", "WebSocket", "down", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=true"}, ""},
	{"cp", "WebSocket", "up", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=true"}, ""},
	{"cp", "SPDY", "down", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false"}, ""},
	{"cp", "SPDY", "up", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false"}, ""},
	{"port-forward", "SPDY in WebSocket", "down", []string{"KUBECTL_PORT_FORWARD_WEBSOCKETS=true"}, ""},
	{"port-forward", "SPDY in WebSocket", "up", []string{"KUBECTL_PORT_FORWARD_WEBSOCKETS=true"}, ""},
	{"port-forward", "SPDY", "down", []string{"KUBECTL_PORT_FORWARD_WEBSOCKETS=false"}, "stream-pf-spdy"},
	{"port-forward", "SPDY", "up", []string{"KUBECTL_PORT_FORWARD_WEBSOCKETS=false"}, ""},
}

// streams measures every streamKind with the real kubectl, direct and
// through Limen, and the size of the recordings the Limen exec output runs
// left.
func streams(ctx context.Context, c config, s *setup, r *bench.Results) {
	// kubectl cp's file, random bytes: the pods share this host's files.
	s.copySource = filepath.Join(s.env.Dir, "cp-source")
	if err := bench.WriteRandomFile(s.copySource, c.streamSize); err != nil {
		r.Notes = append(r.Notes, "kubectl cp not measured: "+err.Error())
	}
	for _, kind := range streamKinds {
		pair := bench.StreamPair{Name: kind.name, Transport: kind.transport, Direction: kind.direction,
			Recorded: strings.HasPrefix(kind.name, "exec output")}
		for _, t := range []target{s.direct, s.baseline, s.twoHops, s.limen} {
			k := bench.Kubectl{Path: c.kubectl, Kubeconfig: t.kubeconfig, Env: kind.env}
			if t.name != "direct" && t.name != "limen" {
				// A careless hop: its rate and CPU alone, the floor beside Limen's.
				pids := []int{s.baselinePID}
				if t.name != s.baseline.name {
					pids = append(pids, s.twoHopsPID)
				}
				cpu0 := cpuOf(pids)
				rates, err := streamRuns(ctx, c, k, s, kind)
				rate, perMiB := bench.Median(rates), time.Duration(0)
				if carried := float64(len(rates)) * float64(c.streamSize) / (1 << 20); carried > 0 {
					perMiB = time.Duration(float64(cpuOf(pids)-cpu0) / carried)
				}
				if err != nil {
					pair.HopErr = fmt.Sprintf("%s: %v", t.name, err)
				}
				if t.name == s.baseline.name {
					pair.OneHop, pair.OneHopCPU = rate, perMiB
				} else {
					pair.TwoHops, pair.TwoHopsCPU = rate, perMiB
				}
				progress(os.Stderr, "%-6s %s: %.1f MiB/s %s", t.name, pair.Label(), rate, pair.HopErr)
				continue
			}
			var wait func() (bench.Profile, error)
			if c.profile && t.name == "limen" && kind.profile != "" {
				wait = profileDuring(ctx, s, "Stream throughput: "+pair.Label(), kind.profile,
					fmt.Sprintf("the %d runs of %s through Limen", c.streamRuns, mib(c.streamSize)), 10*time.Second)
			}
			before, cpu0 := recordings(s), cpu(s)
			machine0, machineErr := bench.ReadMachineCPU()
			rates, err := streamRuns(ctx, c, k, s, kind)
			if err != nil {
				pair.Err = fmt.Sprintf("%s: %v", t.name, err)
			}
			// Read before the profile's end is waited for: the machine's
			// figures are of the runs alone.
			carried := float64(len(rates)) * float64(c.streamSize) / (1 << 20)
			used := cpu(s).minus(cpu0)
			var load bench.MachineLoad
			if machine1, err := bench.ReadMachineCPU(); err == nil && machineErr == nil && carried > 0 {
				m := machine1.Minus(machine0)
				load = bench.MachineLoad{PerMiB: time.Duration(float64(m.Busy) / carried), Busy: m.BusyShare()}
			}
			if wait != nil {
				if p, err := wait(); err != nil {
					r.Notes = append(r.Notes, "stream CPU profile not taken: "+err.Error())
				} else {
					r.Profiles = append(r.Profiles, p)
				}
			}
			if t.name == "direct" {
				pair.Direct = bench.Median(rates)
				pair.DirectMachine = load
			} else {
				pair.LimenMachine = load
				pair.Limen = bench.Median(rates)
				if carried > 0 {
					pair.ProxyCPU = time.Duration(float64(used.proxy) / carried)
					pair.WorkerCPU = time.Duration(float64(used.worker) / carried)
				}
				if pair.Recorded && pair.Err == "" {
					pair.RecordingRatio = recordingRatio(ctx, s, before, int64(len(rates))*c.streamSize)
				}
			}
			progress(os.Stderr, "%-6s %s: %.1f MiB/s %s", t.name, pair.Label(), bench.Median(rates), pair.Err)
		}
		r.Streams = append(r.Streams, pair)
	}
}

// streamRuns runs kind c.streamRuns times through k and returns each run's
// MiB/s, up to the first run that failed and its error.
func streamRuns(ctx context.Context, c config, k bench.Kubectl, s *setup, kind streamKind) ([]float64, error) {
	var rates []float64
	for range c.streamRuns {
		rate, err := streamRun(ctx, k, s, kind, c.streamSize)
		if err != nil {
			return rates, err
		}
		rates = append(rates, rate)
	}
	return rates, nil
}

// streamRun moves size bytes once as kind says and returns MiB/s.
func streamRun(ctx context.Context, k bench.Kubectl, s *setup, kind streamKind, size int64) (float64, error) {
	up := kind.direction == "up"
	switch {
	case kind.name == "cp":
		return bench.CopyThroughput(ctx, k, nsPods, execPod, s.copySource, s.env.Dir, size, up)
	case kind.name == "port-forward" && up:
		return bench.PortForwardThroughput(ctx, k, nsPods, serverPod, s.sinkPort, size, true)
	case kind.name == "port-forward":
		return bench.PortForwardThroughput(ctx, k, nsPods, serverPod, s.zeroPort, size, false)
	case up:
		return bench.ExecInputThroughput(ctx, k, nsPods, execPod, size)
	}
	return bench.ExecThroughput(ctx, k, nsPods, execPod, size, strings.Contains(kind.name, "binary"))
}

// recordings returns the finished recordings in the worker's spool and the
// proxy's store by file name (an uploaded recording is in both, with the
// same bytes), with their sizes.
func recordings(s *setup) map[string]int64 {
	found := map[string]int64{}
	for _, role := range []string{"proxy", "worker"} {
		root := filepath.Join(s.env.Dir, role)
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".cast") {
				return nil
			}
			if info, err := d.Info(); err == nil {
				found[d.Name()] = info.Size()
			}
			return nil
		})
	}
	return found
}

// recordingRatio waits (up to 30 s) until the runs' recordings are finished
// and returns their bytes over output, the bytes they carried; 0 if none
// appeared.
func recordingRatio(ctx context.Context, s *setup, before map[string]int64, output int64) float64 {
	deadline := time.Now().Add(30 * time.Second)
	var last int64 = -1
	for {
		var added int64
		for name, size := range recordings(s) {
			if _, old := before[name]; !old {
				added += size
			}
		}
		// Finished recordings are renamed from .cast.part once complete:
		// the total stops growing when the last one is.
		if (added > 0 && added == last) || time.Now().After(deadline) || ctx.Err() != nil {
			if added == 0 || output == 0 {
				return 0
			}
			return float64(added) / float64(output)
		}
		last = added
		time.Sleep(time.Second)
	}
}

// recordingState says whether the Limen exec runs were recorded: whether
// recording files appeared in the proxy's or worker's data directory.
func recordingState(s *setup) string {
	var files int
	var size int64
	dirs := map[string]bool{}
	for _, role := range []string{"proxy", "worker"} {
		root := filepath.Join(s.env.Dir, role)
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.Contains(strings.ToLower(path[len(root):]), "record") {
				return nil
			}
			if info, err := d.Info(); err == nil {
				files, size = files+1, size+info.Size()
				dirs[filepath.Dir(path[len(s.env.Dir)+1:])] = true
			}
			return nil
		})
	}
	if files == 0 {
		return "off — no recording files in the proxy's or worker's data directory after the exec runs through Limen"
	}
	where := slices.Sorted(maps.Keys(dirs))
	progress(os.Stderr, "recording: %d files, %d MiB in %v", files, size>>20, where)
	return fmt.Sprintf("on — the exec runs through Limen left %d recording files (%.0f MiB) in %s; "+
		"port-forward is audited, not recorded", files, float64(size)/(1<<20), strings.Join(where, ", "))
}
