package bench

import (
	"os"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       time.Duration
		err        bool
	}{
		{"plain", "1234 (limen) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0 100 0 0", 3250 * time.Millisecond, false},
		{"name with spaces and parens", "99 (a) b (c)) R 1 2 3 4 5 6 7 8 9 10 7 3 0 0", 100 * time.Millisecond, false},
		{"no paren", "1234 limen S 1", 0, true},
		{"short", "1 (x) S 1 2 3", 0, true},
		{"not a number", "1 (x) S 1 2 3 4 5 6 7 8 9 10 u 3 0", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatCPU(tc.stat)
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("parseStatCPU = %v, %v; want %v, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestParseVmRSS(t *testing.T) {
	for _, tc := range []struct {
		name, status string
		want         int64
		err          bool
	}{
		{"present", "Name:\tlimen\nVmPeak:\t 9 kB\nVmRSS:\t   2048 kB\nThreads:\t9\n", 2048 * 1024, false},
		{"missing", "Name:\tlimen\n", 0, true},
		{"bad unit", "VmRSS:\t 12 MB\n", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseVmRSS(tc.status)
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("parseVmRSS = %v, %v; want %v, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestOwnProcess(t *testing.T) {
	if _, err := CPUTime(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if rss, err := RSS(os.Getpid()); err != nil || rss <= 0 {
		t.Fatalf("RSS = %d, %v", rss, err)
	}
}

func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       MachineCPU
		err        bool
	}{
		{"two states busy", "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\n",
			MachineCPU{Busy: 1500 * time.Millisecond, Total: 10 * time.Second}, false},
		{"irq softirq steal are busy", "cpu 1 1 1 1 1 1 1 1\n", MachineCPU{Busy: 60 * time.Millisecond, Total: 80 * time.Millisecond}, false},
		{"not the cpu line", "cpu0 1 2 3 4 5 6 7 8\n", MachineCPU{}, true},
		{"too few states", "cpu 1 2 3\n", MachineCPU{}, true},
		{"negative", "cpu 1 2 3 -4 5 6 7 8\n", MachineCPU{}, true},
		{"not a number", "cpu 1 2 x 4 5 6 7 8\n", MachineCPU{}, true},
		{"empty", "", MachineCPU{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStat(tc.stat)
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("parseProcStat = %+v, %v; want %+v, error %v", got, err, tc.want, tc.err)
			}
		})
	}
	m, err := ReadMachineCPU()
	if err != nil || m.Busy <= 0 || m.Total < m.Busy {
		t.Fatalf("ReadMachineCPU = %+v, %v", m, err)
	}
}
