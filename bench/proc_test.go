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
