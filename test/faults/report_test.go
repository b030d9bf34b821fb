package faults

import (
	"fmt"
	"strings"
	"testing"
	"time"

	chaos "github.com/limenhq/limen/test/load"
)

// figures is one scenario's section of the chaos report (test/load's
// CHAOS_REPORT file): what the clients saw during the fault, how long
// service took to return once it was gone, and what was lost.
type figures struct {
	scenario  string
	saw       string        // what the clients were told during the fault
	recovered time.Duration // from the fault's end to the first request served; negative: never refused
	v         verdict
	extra     string
}

func (f figures) lines() []string {
	back := "served throughout"
	if f.recovered >= 0 {
		back = fmt.Sprintf("service back %s after the fault ended, by itself (no restart)", f.recovered.Round(time.Millisecond))
	}
	lines := []string{
		"clients saw: " + f.saw,
		back,
		fmt.Sprintf("load: GETs %d served, %d refused; watch %s; %d execs (%d lines) checked against %d whole recordings",
			f.v.served, f.v.refused, f.v.watchEnds, f.v.execs, f.v.execLines, f.v.recordings),
		"lost: " + f.v.lost(),
	}
	if f.extra != "" {
		lines = append(lines, strings.TrimPrefix(f.extra, "; "))
	}
	return lines
}

// report logs the figures and appends them to the chaos report.
func report(t *testing.T, f figures) {
	t.Helper()
	chaos.Figures(t, "faults/"+f.scenario, f.lines()...)
}
