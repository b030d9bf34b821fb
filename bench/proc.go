package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of utime and stime in /proc/PID/stat. Linux fixes
// USER_HZ at 100 for user space on every architecture Limen builds for.
const userHZ = 100

// CPUTime returns the user plus system CPU time the process has used.
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(b))
}

// parseStatCPU reads utime and stime (fields 14 and 15) of a /proc/PID/stat
// line. The command name (field 2) may hold spaces and parentheses, so the
// fields are counted from its last ')'.
func parseStatCPU(stat string) (time.Duration, error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("stat: no ')' in %q", stat)
	}
	f := strings.Fields(stat[end+1:])
	// f[0] is field 3 (state), so field N is f[N-3].
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command, want at least 13", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat: utime/stime %q: %w", s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// RSS returns the resident set size of the process in bytes.
func RSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseVmRSS(string(b))
}

// parseVmRSS reads the VmRSS line ("VmRSS:	  12345 kB") of /proc/PID/status.
func parseVmRSS(status string) (int64, error) {
	sc := bufio.NewScanner(strings.NewReader(status))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("status: unexpected VmRSS line %q", sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("status: VmRSS %q: %w", f[0], err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("status: no VmRSS line")
}

// LoadAvg returns the first three fields of /proc/loadavg ("0.52 0.61 0.70").
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return strings.TrimSpace(string(b))
	}
	return strings.Join(f[:3], " ")
}

// PeakRSS samples the resident size of some processes until Stop and keeps
// the largest value seen for each.
type PeakRSS struct {
	cancel context.CancelFunc
	done   chan struct{}
	peak   map[int]int64 // written by the sampling goroutine until done
}

// SamplePeakRSS starts sampling pids every interval until Stop or ctx ends.
func SamplePeakRSS(ctx context.Context, interval time.Duration, pids ...int) *PeakRSS {
	ctx, cancel := context.WithCancel(ctx)
	p := &PeakRSS{cancel: cancel, done: make(chan struct{}), peak: map[int]int64{}}
	go func() {
		defer close(p.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			for _, pid := range pids {
				if v, err := RSS(pid); err == nil && v > p.peak[pid] {
					p.peak[pid] = v
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return p
}

// Stop ends the sampling and returns the peak resident size of each pid.
func (p *PeakRSS) Stop() map[int]int64 {
	p.cancel()
	<-p.done
	return p.peak
}

// MachineCPU is the whole machine's CPU time so far, over all its cores,
// from the first line of /proc/stat: Busy is every state but idle and
// iowait, Total every state.
type MachineCPU struct{ Busy, Total time.Duration }

// ReadMachineCPU reads /proc/stat.
func ReadMachineCPU() (MachineCPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return MachineCPU{}, err
	}
	return parseProcStat(string(b))
}

// parseProcStat reads the "cpu" line of /proc/stat: user nice system idle
// iowait irq softirq steal (guest time is already in user), in USER_HZ.
func parseProcStat(stat string) (MachineCPU, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return MachineCPU{}, fmt.Errorf("/proc/stat: first line %q is not the cpu line with 8 states", line)
	}
	var m MachineCPU
	for i, s := range f[1:9] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return MachineCPU{}, fmt.Errorf("/proc/stat: state %d %q is not a count", i+1, s)
		}
		d := time.Duration(n) * time.Second / userHZ
		m.Total += d
		if i != 3 && i != 4 { // idle, iowait
			m.Busy += d
		}
	}
	return m, nil
}

// Minus is the CPU time used between b and m.
func (m MachineCPU) Minus(b MachineCPU) MachineCPU {
	return MachineCPU{m.Busy - b.Busy, m.Total - b.Total}
}

// BusyShare is the share of all cores' time that was busy (0 to 1).
func (m MachineCPU) BusyShare() float64 {
	if m.Total <= 0 {
		return 0
	}
	return float64(m.Busy) / float64(m.Total)
}
