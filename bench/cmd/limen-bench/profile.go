package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/limenhq/limen/bench"
)

// When a goal is not met, the harness profiles the proxy and worker through
// their pprof endpoints (pprof.go) and counts the proxy's fsync calls with
// strace, while a load runs through Limen.

// underLoad runs requests of path through Limen at concurrency conc until f
// returns, and returns how many completed.
func underLoad(ctx context.Context, s *setup, path string, conc int, f func() error) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var done int
	wg.Go(func() {
		for ctx.Err() == nil {
			cell, _ := bench.Load(ctx, s.limen.client, s.limen.base+path, conc, 100)
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

// fsyncTrace counts the proxy's fsync calls with strace for d under a GET
// load at concurrency 1: each request waits for its audit event's commit.
func fsyncTrace(ctx context.Context, s *setup, d time.Duration) (string, error) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		return "", fmt.Errorf("strace is not installed")
	}
	var out []byte
	n, err := underLoad(ctx, s, getPath, 1, func() error {
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

// diagnose profiles the gateway processes for the report when a goal is not
// met: CPU during GETs at c=1 and c=64 and LISTs at c=16, then the fsync
// count.
func diagnose(ctx context.Context, c config, s *setup, r *bench.Results) {
	d := 10 * time.Second
	if c.quick {
		d = 3 * time.Second
	}
	get := "Added latency and CPU per request: GET one ConfigMap, "
	for _, p := range []struct {
		title, name, path string
		conc              int
	}{
		{get + "c=1", "get-c1", getPath, 1},
		{get + "c=64", "get-c64", getPath, 64},
		{fmt.Sprintf("Added latency and CPU per request: LIST %d ConfigMaps, c=16", listSize), "list-c16", listPath, 16},
	} {
		prof, err := cpuProfiles(ctx, s, p.title, p.name, p.path, p.conc, d)
		if err != nil {
			r.Notes = append(r.Notes, "CPU profile not taken: "+err.Error())
			continue
		}
		r.Profiles = append(r.Profiles, prof)
	}
	text, err := fsyncTrace(ctx, s, d)
	if err != nil {
		r.Notes = append(r.Notes, "strace not taken: "+err.Error())
		return
	}
	r.Profiles = append(r.Profiles, bench.Profile{Title: "The proxy's fsync per request", Text: text})
}
