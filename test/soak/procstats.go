// Package soak holds idle streams open through Limen for a long time, with
// periodic traffic, and checks that none drops and that the proxy's and
// worker's memory and goroutines stay flat (`make soak`). Its Probe, which
// reads those figures from a running limen process, is shared with
// test/crowd.
package soak

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/limenhq/limen/bench"
)

// Probe reads the figures of one running limen process: its resident set
// from /proc and, from the pprof endpoints it serves with --debug-listen,
// its Go heap and goroutine count.
type Probe struct {
	Name  string     // "proxy", "worker"
	PID   func() int // the process, looked up at each read (0: not running)
	Debug string     // its --debug-listen HOST:PORT
}

// Stats are one reading of a Probe.
type Stats struct {
	RSS        int64 // bytes resident (VmRSS)
	HeapInuse  int64 // bytes in in-use heap spans, right after a forced GC
	HeapAlloc  int64 // bytes of live heap objects, right after a forced GC
	Goroutines int
}

// Read takes one reading. The heap figure comes after a GC the endpoint
// forces (heap?gc=1), so that garbage not yet collected does not pass for
// growth.
func (p Probe) Read(ctx context.Context) (Stats, error) {
	var s Stats
	pid := p.PID()
	if pid == 0 {
		return s, fmt.Errorf("%s: not running", p.Name)
	}
	var err error
	if s.RSS, err = bench.RSS(pid); err != nil {
		return s, fmt.Errorf("%s: RSS of pid %d: %w", p.Name, pid, err)
	}
	heap, err := p.get(ctx, "heap?gc=1&debug=1")
	if err != nil {
		return s, err
	}
	if s.HeapInuse, err = memStat(heap, "HeapInuse"); err != nil {
		return s, fmt.Errorf("%s: %w", p.Name, err)
	}
	if s.HeapAlloc, err = memStat(heap, "HeapAlloc"); err != nil {
		return s, fmt.Errorf("%s: %w", p.Name, err)
	}
	gr, err := p.get(ctx, "goroutine?debug=1")
	if err != nil {
		return s, err
	}
	if s.Goroutines, err = goroutineTotal(gr); err != nil {
		return s, fmt.Errorf("%s: %w", p.Name, err)
	}
	return s, nil
}

func (p Probe) get(ctx context.Context, profile string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	url := "http://" + p.Debug + "/debug/pprof/" + profile
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("%s: %w (is it running with --debug-listen %s?)", p.Name, err, p.Debug)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("%s: read %s: %w", p.Name, url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: GET %s: %s", p.Name, url, resp.Status)
	}
	return string(b), nil
}

// memStat reads "# NAME = N" (runtime.MemStats) from the text form of a
// heap profile.
func memStat(profile, name string) (int64, error) {
	sc := bufio.NewScanner(strings.NewReader(profile))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# "+name+" = "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("heap profile has no %s line", name)
}

// goroutineTotal reads "goroutine profile: total N", the first line of the
// text form of a goroutine profile.
func goroutineTotal(profile string) (int, error) {
	first, _, _ := strings.Cut(profile, "\n")
	v, ok := strings.CutPrefix(first, "goroutine profile: total ")
	if !ok {
		return 0, fmt.Errorf("goroutine profile starts %q, want \"goroutine profile: total N\"", first)
	}
	return strconv.Atoi(strings.TrimSpace(v))
}

// FreeAddr returns a loopback HOST:PORT free at the time of the call, for a
// --debug-listen.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Slope is the least-squares slope of ys over xs (units of y per unit of
// x); 0 for fewer than two points.
func Slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	if len(xs) < 2 || len(xs) != len(ys) {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// MiB formats bytes as MiB with one decimal.
func MiB(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

// SaveHeap writes the process's heap profile (after a GC) to path, for go
// tool pprof (-base another to see what a run left behind).
func (p Probe) SaveHeap(ctx context.Context, path string) error {
	b, err := p.get(ctx, "heap?gc=1")
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b), 0o644)
}
