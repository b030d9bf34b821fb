package faults

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// reportEnv names the file each scenario appends its figures line to.
const reportEnv = "CHAOS_REPORT"

var reportMu sync.Mutex

// figures is one scenario's line in the chaos report: what the clients saw
// during the fault, how long service took to return once it was gone, and
// what was lost.
type figures struct {
	scenario  string
	saw       string        // what the clients were told during the fault
	recovered time.Duration // from the fault's end to the first request served; negative: never refused
	v         verdict
	extra     string
}

func (f figures) String() string {
	back := "served throughout"
	if f.recovered >= 0 {
		back = fmt.Sprintf("service back %s after the fault ended, by itself", f.recovered.Round(time.Millisecond))
	}
	return fmt.Sprintf("faults/%s: clients saw: %s; %s; "+
		"GETs %d served, %d refused; watch: %s; %d execs (%d lines) checked against %d whole recordings; %s%s; load average %s",
		f.scenario, f.saw, back, f.v.served, f.v.refused, f.v.watchEnds,
		f.v.execs, f.v.execLines, f.v.recordings, f.v.lost(), f.extra, loadAverage())
}

// report logs the figures and appends them to $CHAOS_REPORT, if set.
func report(t *testing.T, f figures) {
	t.Helper()
	line := f.String()
	t.Log(line)
	path := os.Getenv(reportEnv)
	if path == "" {
		return
	}
	reportMu.Lock()
	defer reportMu.Unlock()
	file, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Errorf("%s: %v", reportEnv, err)
		return
	}
	defer file.Close()
	if _, err := fmt.Fprintln(file, line); err != nil {
		t.Errorf("%s: %v", reportEnv, err)
	}
}

// loadAverage is /proc/loadavg's three figures: on a shared machine, every
// duration above is read against them.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
