package crowd

import (
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/limenhq/limen/test/soak"
)

// addrPort is an address in an error message, whose port differs from
// stream to stream.
var (
	addrPort = regexp.MustCompile(`(\d+\.\d+\.\d+\.\d+):\d+`)
	streamID = regexp.MustCompile(`stream ID \d+`)
)

type report struct {
	text     string
	failures []string
}

// report writes the run's figures as markdown and lists what failed.
func (r *run) report(n int, base, peak, after reading, lat, fromStart latencies, late int, lockTook, settle time.Duration, peakLoad, lockLoad string) report {
	var rep report
	var b strings.Builder
	commit := "unknown"
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
	}
	fmt.Fprintf(&b, "# Crowd: %d streams through one proxy and one worker, then one lock\n\n", n)
	fmt.Fprintf(&b, "%s UTC, commit %s. The user alice, through Limen, from client-go in the test process (one HTTP/2 client for the watches and logs; "+
		"each exec a connection of its own); one `limen lock alice` as admin.\n\n", time.Now().UTC().Format("2006-01-02 15:04"), commit)
	counts := map[kind]int{}
	told := map[kind]map[string]int{} // what the clients were told, by kind
	for _, s := range r.streams {
		counts[s.kind]++
		msg := "a clean end (no error)"
		if s.err != nil {
			msg = addrPort.ReplaceAllString(s.err.Error(), "$1:PORT")
			msg = streamID.ReplaceAllString(msg, "stream ID N")
		}
		if told[s.kind] == nil {
			told[s.kind] = map[string]int{}
		}
		told[s.kind][msg]++
	}
	fmt.Fprintf(&b, "## Lock → end\n\nFrom the return of `limen lock` (the process took %s) to each client seeing its stream end; "+
		"a negative figure is a stream that ended before the command had returned. In brackets, from the command's start. "+
		"Load average %s with the streams open, %s right after the lock.\n\n", ms(lockTook), peakLoad, lockLoad)
	fmt.Fprintf(&b, "| kind | streams | ended | p50 | p99 | max |\n|---|---|---|---|---|---|\n")
	for _, k := range []kind{kindWatch, kindLogs, kindExec, kindSPDY, allKinds} {
		ds, fs := lat[k], fromStart[k]
		c := counts[k]
		if k == allKinds {
			c = n
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s (%s) | %s (%s) | %s (%s) |\n", k, c, len(ds),
			ms(quantile(ds, 0.5)), ms(quantile(fs, 0.5)), ms(quantile(ds, 0.99)), ms(quantile(fs, 0.99)), ms(quantile(ds, 1)), ms(quantile(fs, 1)))
	}
	fmt.Fprintf(&b, "\nWhat the clients were told:\n\n")
	for _, k := range []kind{kindWatch, kindLogs, kindExec, kindSPDY} {
		msgs := make([]string, 0, len(told[k]))
		for m, c := range told[k] {
			msgs = append(msgs, fmt.Sprintf("%d× %q", c, m))
		}
		slices.Sort(msgs)
		if len(msgs) > 5 {
			msgs = append(msgs[:5], fmt.Sprintf("and %d other messages", len(msgs)-5))
		}
		fmt.Fprintf(&b, "* %s: %s\n", k, strings.Join(msgs, "; "))
	}
	if late > 0 {
		rep.failures = append(rep.failures, fmt.Sprintf("%d of %d streams had not ended 10 s after the lock", late, n))
	}
	if mx := quantile(lat[allKinds], 1); mx > endWithin {
		over := 0
		for _, d := range lat[allKinds] {
			if d > endWithin {
				over++
			}
		}
		rep.failures = append(rep.failures, fmt.Sprintf("%d of %d streams ended later than %s after the lock (max %s)", over, n, endWithin, ms(mx)))
	}

	if c := told[kindSPDY]["a clean end (no error)"] + told[kindExec]["a clean end (no error)"]; c > 0 {
		fmt.Fprintf(&b, "\nNote: %d exec clients were told nothing of the lock: their stream ended as a command that exits 0 does.\n", c)
		// DESIGN.md: a stream Limen ends is never a clean exit 0.
		rep.failures = append(rep.failures, fmt.Sprintf("%d exec clients saw a clean end (exit 0) of a stream the lock ended", c))
	}
	fmt.Fprintf(&b, "\n## Proxy and worker\n\nRSS from /proc/PID/status; live heap = HeapAlloc and heap spans = HeapInuse, right after a forced GC; goroutines; from each process's pprof (--debug-listen). "+
		"Baseline after a warm-up (one stream of each kind opened and closed); after = once within the bounds, or %s after the last end (took %s).\n\n", settleWithin, settle.Round(time.Second))
	fmt.Fprintf(&b, "| process | figure | baseline | %d streams open | after | bound over baseline |\n|---|---|---|---|---|---|\n", n)
	for i, p := range probeNames {
		fmt.Fprintf(&b, "| %s | RSS MiB | %s | %s | %s | +%s |\n", p, soak.MiB(base[i].RSS), soak.MiB(peak[i].RSS), soak.MiB(after[i].RSS), soak.MiB(boundRSS))
		fmt.Fprintf(&b, "| %s | live heap MiB | %s | %s | %s | +%s |\n", p, soak.MiB(base[i].HeapAlloc), soak.MiB(peak[i].HeapAlloc), soak.MiB(after[i].HeapAlloc), soak.MiB(boundHeap))
		fmt.Fprintf(&b, "| %s | heap spans MiB | %s | %s | %s | (not bounded) |\n", p, soak.MiB(base[i].HeapInuse), soak.MiB(peak[i].HeapInuse), soak.MiB(after[i].HeapInuse))
		fmt.Fprintf(&b, "| %s | goroutines | %d | %d | %d | +%d |\n", p, base[i].Goroutines, peak[i].Goroutines, after[i].Goroutines, boundGoroutines)
	}
	rep.failures = append(rep.failures, overBounds(base, after)...)
	if len(rep.failures) == 0 {
		fmt.Fprintf(&b, "\n**PASS**: every stream ended within %s of the lock; memory and goroutines back to baseline.\n", endWithin)
	} else {
		fmt.Fprintf(&b, "\n**FAIL**:\n\n")
		for _, f := range rep.failures {
			fmt.Fprintf(&b, "* %s\n", f)
		}
	}
	rep.text = b.String()
	return rep
}
