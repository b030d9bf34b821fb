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
	time.Sleep(2 * time.Second) // let the warm-up garbage be collected before the idle reading
	r.Memory.ProxyIdle, r.Memory.WorkerIdle, r.Memory.APIServerIdle = rss(s.proxy), rss(s.worker), rss(s.apiserver)
	if err := latency(ctx, c, s, r); err != nil {
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
	for _, t := range []target{s.direct, s.limen} {
		time.Sleep(2 * time.Second)
		heap := c.profile && t.name == "limen"
		var before heapSnap
		if heap {
			before, heap = snapOrNote(ctx, s, r, "watch-before")
		}
		a0, p0, w0 := rss(s.apiserver), rss(s.proxy), rss(s.worker)
		ws, err := bench.OpenWatches(ctx, t.client, t.base+url, c.watches)
		if err != nil {
			r.Watch.Err = fmt.Sprintf("%s: %v", t.name, err)
			progress(os.Stderr, "watches: %s", r.Watch.Err)
			return nil
		}
		time.Sleep(3 * time.Second) // the watches are idle: let the processes settle
		a1, p1, w1 := rss(s.apiserver), rss(s.proxy), rss(s.worker)
		if heap {
			prof = watchProfileOrNote(ctx, s, r, before, c.watches)
		}
		ws.Close()
		if t.name == "direct" {
			r.Watch.APIServerDirect = a1 - a0
		} else {
			r.Watch.APIServerLimen, r.Watch.Proxy, r.Watch.Worker = a1-a0, p1-p0, w1-w0
		}
		progress(os.Stderr, "%-6s %d idle watches: API server %+d KiB, proxy %+d KiB, worker %+d KiB",
			t.name, c.watches, (a1-a0)>>10, (p1-p0)>>10, (w1-w0)>>10)
	}
	return prof
}

// streams measures exec output and port-forward throughput with the real
// kubectl over each transport it speaks.
func streams(ctx context.Context, c config, s *setup, r *bench.Results) {
	for _, kind := range []struct {
		name string
		env  []string
		pf   bool
	}{
		{"exec output, WebSocket", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=true"}, false},
		{"exec output, SPDY", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false"}, false},
		{"port-forward, WebSocket (SPDY in WebSocket)", []string{"KUBECTL_PORT_FORWARD_WEBSOCKETS=true"}, true},
		{"port-forward, SPDY", []string{"KUBECTL_PORT_FORWARD_WEBSOCKETS=false"}, true},
	} {
		pair := bench.StreamPair{Name: kind.name}
		for _, t := range []target{s.direct, s.limen} {
			k := bench.Kubectl{Path: c.kubectl, Kubeconfig: t.kubeconfig, Env: kind.env}
			var wait func() (bench.Profile, error)
			if c.profile && t.name == "limen" && len(r.Streams) == 0 { // the first kind: exec over WebSocket
				wait = profileDuring(ctx, s, "Stream throughput: "+kind.name, "stream-exec-ws",
					fmt.Sprintf("the %d exec runs of %s through Limen", c.streamRuns, mib(c.streamSize)), 10*time.Second)
			}
			var rates []float64
			for range c.streamRuns {
				var rate float64
				var err error
				if kind.pf {
					rate, err = bench.PortForwardThroughput(ctx, k, nsPods, serverPod, s.zeroPort, c.streamSize)
				} else {
					rate, err = bench.ExecThroughput(ctx, k, nsPods, execPod, c.streamSize)
				}
				if err != nil {
					pair.Err = fmt.Sprintf("%s: %v", t.name, err)
					break
				}
				rates = append(rates, rate)
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
			} else {
				pair.Limen = bench.Median(rates)
			}
			progress(os.Stderr, "%-6s %s: %.1f MiB/s %s", t.name, kind.name, bench.Median(rates), pair.Err)
		}
		r.Streams = append(r.Streams, pair)
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
