package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/limenhq/limen/bench"
)

// The proxy and worker run with --debug-listen, which serves net/http/pprof
// on loopback; the harness fetches their profiles into bench/out/ (ignored by
// git) and puts `go tool pprof -top` of each in the report.

// gatewayProc is one Limen process and its pprof address.
type gatewayProc struct{ name, debug string }

func (s *setup) procs() []gatewayProc {
	return []gatewayProc{{"proxy", s.proxyDebug}, {"worker", s.workerDebug}}
}

// fetchPprof saves http://ADDR/debug/pprof/PATH to file.
func fetchPprof(ctx context.Context, addr, path, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/"+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET /debug/pprof/%s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// fetchBoth fetches the same profile of the proxy and the worker at once,
// into OUT/NAME-proxy.pb.gz and OUT/NAME-worker.pb.gz, and returns the files.
func fetchBoth(ctx context.Context, s *setup, path, name string) (map[string]string, error) {
	files := map[string]string{}
	for _, p := range s.procs() {
		files[p.name] = filepath.Join(s.out, name+"-"+p.name+".pb.gz")
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, p := range s.procs() {
		wg.Go(func() {
			if err := fetchPprof(ctx, p.debug, path, files[p.name]); err != nil {
				errs[i] = fmt.Errorf("%s: %w", p.name, err)
			}
		})
	}
	wg.Wait()
	return files, errors.Join(errs...)
}

// pprofTop returns `go tool pprof -top -nodecount=15 ARGS` without the
// lines naming the binary and the time.
func pprofTop(ctx context.Context, args ...string) (string, error) {
	args = append([]string{"tool", "pprof", "-top", "-nodecount=15"}, args...)
	out, err := exec.CommandContext(ctx, "go", args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	var keep []string
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if !strings.HasPrefix(l, "File: ") && !strings.HasPrefix(l, "Build ID: ") && !strings.HasPrefix(l, "Time: ") {
			keep = append(keep, "  "+l)
		}
	}
	return strings.Join(keep, "\n"), nil
}

// dropHeader keeps the table of a pprof -top report: the lines from the
// column titles on.
func dropHeader(top string) string {
	lines := strings.Split(top, "\n")
	for i, l := range lines {
		if strings.Contains(l, "flat%") {
			return strings.Join(lines[i:], "\n")
		}
	}
	return top
}

// cpuProfiles takes a CPU profile of the proxy and the worker, at once, for
// d while a load of path at concurrency conc runs through Limen, and returns
// the report section.
func cpuProfiles(ctx context.Context, s *setup, title, name, path string, conc int, d time.Duration) (bench.Profile, error) {
	var files map[string]string
	n, err := underLoad(ctx, s, path, conc, func() error {
		var err error
		files, err = fetchBoth(ctx, s, fmt.Sprintf("profile?seconds=%d", int(d.Seconds())), name+".cpu")
		return err
	})
	if err != nil {
		return bench.Profile{}, err
	}
	return cpuTops(ctx, s, title, files, fmt.Sprintf("/debug/pprof/profile?seconds=%d of the proxy and the worker at once, "+
		"during %d requests at c=%d through Limen", int(d.Seconds()), n, conc))
}

// cpuTops is the report section of CPU profiles: the header and pprof's top
// functions of each process.
func cpuTops(ctx context.Context, s *setup, title string, files map[string]string, header string) (bench.Profile, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s; go tool pprof -top -nodecount=15 (profiles in bench/out/)\n", header)
	for _, p := range s.procs() {
		top, err := pprofTop(ctx, files[p.name])
		if err != nil {
			return bench.Profile{}, err
		}
		own, err := pprofTop(ctx, "-cum", "-show=github.com/limenhq/limen/", files[p.name])
		if err != nil {
			return bench.Profile{}, err
		}
		fmt.Fprintf(&b, "\n%s — %s, by own time:\n%s\n", p.name, filepath.Base(files[p.name]), top)
		fmt.Fprintf(&b, "\n%s — Limen's own functions, by time including callees (-cum -show=github.com/limenhq/limen/):\n%s\n",
			p.name, dropHeader(own))
	}
	return bench.Profile{Title: title, Text: b.String()}, nil
}

// profileDuring starts CPU profiles of the proxy and worker for d in the
// background; the func it returns waits for them and returns the section.
func profileDuring(ctx context.Context, s *setup, title, name, what string, d time.Duration) func() (bench.Profile, error) {
	var files map[string]string
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		files, err = fetchBoth(ctx, s, fmt.Sprintf("profile?seconds=%d", int(d.Seconds())), name+".cpu")
	}()
	return func() (bench.Profile, error) {
		<-done
		if err != nil {
			return bench.Profile{}, err
		}
		return cpuTops(ctx, s, title, files, fmt.Sprintf("/debug/pprof/profile?seconds=%d of the proxy and the worker at once, during %s",
			int(d.Seconds()), what))
	}
}

// heapSnap is the heap and goroutine profiles of both processes at one
// moment, and the runtime's memory figures.
type heapSnap struct {
	heap, goroutine map[string]string // process → profile file
	stats           map[string]runtimeMem
}

// snapHeap fetches the heap (after a GC) and goroutine profiles of the proxy
// and worker into OUT/NAME-*.
func snapHeap(ctx context.Context, s *setup, name string) (heapSnap, error) {
	var h heapSnap
	var err1, err2 error
	if h.heap, err1 = fetchBoth(ctx, s, "heap?gc=1", name+".heap"); err1 == nil {
		h.goroutine, err2 = fetchBoth(ctx, s, "goroutine", name+".goroutine")
	}
	h.stats = map[string]runtimeMem{}
	for _, p := range s.procs() {
		h.stats[p.name] = memStats(ctx, p.debug)
	}
	return h, errors.Join(err1, err2)
}

// runtimeMem is what the Go runtime of a process says it holds, in bytes.
type runtimeMem struct{ heapInuse, stackInuse, sys int64 }

// memStats reads HeapInuse, StackInuse and Sys from the heap profile's text
// form (debug=1); zero if it cannot.
func memStats(ctx context.Context, addr string) runtimeMem {
	var m runtimeMem
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/heap?debug=1", nil)
	if err != nil {
		return m
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return m
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(l, "# "), " = ")
		v, _, _ = strings.Cut(v, " / ") // "Stack = inuse / sys"
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil {
			continue
		}
		switch k {
		case "HeapInuse":
			m.heapInuse = n
		case "Stack":
			m.stackInuse = n
		case "Sys":
			m.sys = n
		}
	}
	return m
}

// perWatch describes the runtime's growth from a to b over n watches.
func perWatch(a, b runtimeMem, n int) string {
	kib := func(d int64) float64 { return float64(d) / float64(n) / 1024 }
	return fmt.Sprintf("HeapInuse %.1f → %.1f MiB (%+.1f KiB per watch), StackInuse %.1f → %.1f MiB (%+.1f KiB per watch), Sys %.1f → %.1f MiB",
		float64(a.heapInuse)/(1<<20), float64(b.heapInuse)/(1<<20), kib(b.heapInuse-a.heapInuse),
		float64(a.stackInuse)/(1<<20), float64(b.stackInuse)/(1<<20), kib(b.stackInuse-a.stackInuse),
		float64(a.sys)/(1<<20), float64(b.sys)/(1<<20))
}

// watchProfile reports what n idle watches added to each process: the heap
// (inuse_space) and goroutine profiles after them, with those before as the
// base.
func watchProfile(ctx context.Context, s *setup, before, after heapSnap, n int) (bench.Profile, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "/debug/pprof/heap?gc=1 and /debug/pprof/goroutine of the proxy and the worker before and with %d idle watches "+
		"through Limen; go tool pprof -top -nodecount=15 -diff_base=<before> (profiles in bench/out/): the growth by function; "+
		"the percentages are of the difference's net total, and the heap is sampled every 512 KiB allocated\n", n)
	for _, p := range s.procs() {
		fmt.Fprintf(&b, "\n%s — Go runtime: %s\n", p.name, perWatch(before.stats[p.name], after.stats[p.name], n))
		heap, err := pprofTop(ctx, "-sample_index=inuse_space", "-diff_base="+before.heap[p.name], after.heap[p.name])
		if err != nil {
			return bench.Profile{}, err
		}
		gor, err := pprofTop(ctx, "-diff_base="+before.goroutine[p.name], after.goroutine[p.name])
		if err != nil {
			return bench.Profile{}, err
		}
		fmt.Fprintf(&b, "\n%s — heap inuse_space added (%s):\n%s\n", p.name, filepath.Base(after.heap[p.name]), heap)
		fmt.Fprintf(&b, "\n%s — goroutines added (%s):\n%s\n", p.name, filepath.Base(after.goroutine[p.name]), gor)
	}
	return bench.Profile{Title: "Memory per idle watch", Text: b.String()}, nil
}

// snapOrNote is snapHeap, its failure noted in r.
func snapOrNote(ctx context.Context, s *setup, r *bench.Results, name string) (heapSnap, bool) {
	h, err := snapHeap(ctx, s, name)
	if err != nil {
		r.Notes = append(r.Notes, "heap profile not taken: "+err.Error())
		return h, false
	}
	return h, true
}

// watchProfileOrNote snaps the heap with the watches open and returns the
// section, or nil with its failure noted in r.
func watchProfileOrNote(ctx context.Context, s *setup, r *bench.Results, before heapSnap, n int) *bench.Profile {
	after, ok := snapOrNote(ctx, s, r, "watch-after")
	if !ok {
		return nil
	}
	p, err := watchProfile(ctx, s, before, after, n)
	if err != nil {
		r.Notes = append(r.Notes, "heap profile not summarised: "+err.Error())
		return nil
	}
	return &p
}
