package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/limenhq/limen/bench"
)

// The proxy and worker have no profiling endpoint, and the harness does not
// change them: it samples them from outside with perf (CPU, with call
// stacks) and strace (time spent in fsync), while a load runs through Limen.

// underLoad runs GET requests through Limen at concurrency conc until f
// returns, and returns how many completed.
func underLoad(ctx context.Context, s *setup, conc int, f func() error) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var done int
	wg.Go(func() {
		for ctx.Err() == nil {
			cell, _ := bench.Load(ctx, s.limen.client, s.limen.base+getPath, conc, 100)
			if cell != nil {
				done += cell.Hist.Len()
			}
		}
	})
	err := f()
	cancel()
	wg.Wait()
	return done, err
}

// perfProfile records the proxy and the worker with perf for d under a GET
// load at concurrency 16 and returns perf's reports: where the CPU goes.
func perfProfile(ctx context.Context, s *setup, d time.Duration) (string, error) {
	perf, err := exec.LookPath("perf")
	if err != nil {
		return "", fmt.Errorf("perf is not installed")
	}
	procs := []struct {
		name string
		pid  int
	}{{"proxy", s.proxy}, {"worker", s.worker}}
	secs := strconv.Itoa(int(d.Seconds()))
	n, err := underLoad(ctx, s, 16, func() error {
		var wg sync.WaitGroup
		errs := make([]error, len(procs))
		for i, p := range procs {
			wg.Go(func() {
				data := filepath.Join(s.env.Dir, p.name+".perf.data")
				out, err := exec.CommandContext(ctx, perf, "record", "-F", "499", "-g", "-o", data,
					"-p", strconv.Itoa(p.pid), "--", "sleep", secs).CombinedOutput()
				if err != nil {
					errs[i] = fmt.Errorf("perf record %s: %w: %s", p.name, err, out)
				}
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "perf record -F 499 -g -p <pid>, proxy and worker apart, for %s during %d GETs at c=16 through Limen\n", d, n)
	for _, p := range procs {
		data := filepath.Join(s.env.Dir, p.name+".perf.data")
		for _, rep := range []struct {
			title string
			args  []string
			only  func(string) bool
		}{
			{"self time, top symbols", []string{"--no-children", "--percent-limit", "1.5"}, nil},
			{"time including callees, Limen's own functions", []string{"--children", "--percent-limit", "3"}, func(l string) bool {
				return strings.Contains(l, "limenhq/limen/") || strings.Contains(l, "[.] main.")
			}},
		} {
			args := append([]string{"report", "-i", data, "--stdio", "-g", "none", "--sort", "symbol"}, rep.args...)
			out, err := exec.CommandContext(ctx, perf, args...).Output()
			if err != nil {
				return "", fmt.Errorf("perf report %s: %w", p.name, err)
			}
			fmt.Fprintf(&b, "\n%s — %s:\n%s\n", p.name, rep.title, perfLines(string(out), 25, rep.only))
		}
	}
	return b.String(), nil
}

// perfLines keeps the sample lines of a perf report, at most limit, without
// the padding and the empty trailing columns.
func perfLines(report string, limit int, only func(string) bool) string {
	var keep []string
	for _, l := range strings.Split(report, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") || (only != nil && !only(l)) {
			continue
		}
		for len(f) > 0 && f[len(f)-1] == "-" {
			f = f[:len(f)-1]
		}
		keep = append(keep, "  "+strings.Join(f, "  "))
		if len(keep) == limit {
			break
		}
	}
	return strings.Join(keep, "\n")
}

// fsyncTrace counts the proxy's fsync calls with strace for d under a GET
// load at concurrency 1: each request waits for its audit event's commit.
func fsyncTrace(ctx context.Context, s *setup, d time.Duration) (string, error) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		return "", fmt.Errorf("strace is not installed")
	}
	var out []byte
	n, err := underLoad(ctx, s, 1, func() error {
		tctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		cmd := exec.CommandContext(tctx, strace, "-f", "-c", "-e", "trace=fsync,fdatasync,pwrite64,write", "-p", strconv.Itoa(s.proxy))
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) } // strace prints its summary on SIGINT
		cmd.WaitDelay = 5 * time.Second
		out, _ = cmd.CombinedOutput()
		return nil
	})
	if err != nil {
		return "", err
	}
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.Contains(l, "strace: Process") {
			keep = append(keep, l)
		}
	}
	return fmt.Sprintf("strace -f -c -p <proxy> for %s during %d GETs at c=1 through Limen (strace slows the traced calls)\n\n%s",
		d, n, strings.TrimSpace(strings.Join(keep, "\n"))), nil
}

// diagnose samples the gateway processes for the report when a goal is not
// met.
func diagnose(ctx context.Context, c config, s *setup, r *bench.Results) {
	d := 10 * time.Second
	if c.quick {
		d = 3 * time.Second
	}
	for _, f := range []func(context.Context, *setup, time.Duration) (string, error){perfProfile, fsyncTrace} {
		text, err := f(ctx, s, d)
		if err != nil {
			r.Notes = append(r.Notes, "profile not taken: "+err.Error())
			continue
		}
		r.Profiles = append(r.Profiles, text)
	}
}
