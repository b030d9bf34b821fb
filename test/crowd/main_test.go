// Package crowd opens many concurrent streams (watches, followed logs and
// execs) as one user through one proxy and one worker, then locks the user
// once: every stream must end within a second of the lock, and the proxy's
// and worker's memory and goroutines must come back to where they were.
//
// `go test ./test/crowd` runs a slice of 50 streams (part of make test);
// `make crowd` runs 1,000 (LIMEN_CROWD_STREAMS).
package crowd

import (
	"os"
	"strconv"
	"testing"

	"github.com/limenhq/limen/test/cluster/clustertest"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// The environment variables of a run (`make crowd` sets them).
const (
	envCrowd   = "LIMEN_CROWD"         // set: the full run; unset, only a small size runs
	envStreams = "LIMEN_CROWD_STREAMS" // how many streams (default: 1000 with LIMEN_CROWD, else the slice)
	envReport  = "LIMEN_CROWD_REPORT"  // where the markdown report goes (default: only the test log)
)

const (
	fullStreams  = 1000
	sliceStreams = 50
	// smallMax is the most streams that run without LIMEN_CROWD.
	smallMax = 100
)

// streams is the size of this run; it skips the test when a large size is
// asked without LIMEN_CROWD.
func streams(t *testing.T) int {
	t.Helper()
	n := sliceStreams
	if os.Getenv(envCrowd) != "" {
		n = fullStreams
	}
	if v := os.Getenv(envStreams); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 3 || n > 20000 {
			t.Fatalf("%s=%q: want an integer between 3 and 20000", envStreams, v)
		}
	}
	if n > smallMax && os.Getenv(envCrowd) == "" {
		t.Skipf("%d streams need %s=1 (make crowd); without it at most %d run", n, envCrowd, smallMax)
	}
	return n
}
