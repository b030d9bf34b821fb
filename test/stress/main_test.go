// Package stress moves many large streams through Limen (recording on) and
// directly to the API server, under a CPU-burning neighbour, and checks that
// every byte, every checksum and every exit code arrives as sent: exec
// output, exec stdin (a cat round trip), kubectl cp both ways and
// port-forward both ways, over every transport kubectl speaks.
//
// `go test ./test/stress` runs a small slice (part of `make test`);
// `make stress` runs the full suite. The size of a run is set by
// environment variables (see loadConfig).
package stress

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/limenhq/limen/test/cluster/clustertest"
)

func TestMain(m *testing.M) {
	// The pod's processes run on this host (the fake kubelet), so this very
	// binary serves as the pod's data generator and as the CPU neighbour.
	if code, ok := helperMain(os.Args[1:]); ok {
		os.Exit(code)
	}
	clustertest.Main(m)
}

// The environment variables that size a run. The defaults are the slice
// `make test` runs.
const (
	envRuns        = "LIMEN_STRESS_RUNS"        // runs per case, through Limen and again direct
	envMiB         = "LIMEN_STRESS_MIB"         // MiB per run (each way for round trips)
	envConcurrency = "LIMEN_STRESS_CONCURRENCY" // streams at once in a batch
	envBurn        = "LIMEN_STRESS_BURN"        // spinning threads of the neighbour; 0 for none
	envData        = "LIMEN_STRESS_DATA"        // text (default) or binary: what the streams carry
	envReport      = "LIMEN_STRESS_REPORT"      // if set, the result table is also written to this file
)

// config is the size of one stress run.
type config struct {
	runs, conc, burn int
	size             int64
	binary           bool // random bytes rather than printable text
	report           string
}

func loadConfig(t *testing.T) config {
	t.Helper()
	get := func(name string, def, lo int) int {
		v := os.Getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lo {
			t.Fatalf("%s=%q: want an integer ≥ %d", name, v, lo)
		}
		return n
	}
	var binary bool
	switch v := os.Getenv(envData); v {
	case "", "text":
	case "binary":
		binary = true
	default:
		t.Fatalf("%s=%q: want text or binary", envData, v)
	}
	return config{
		runs:   get(envRuns, 2, 1),
		size:   int64(get(envMiB, 16, 1)) << 20,
		conc:   get(envConcurrency, 2, 1),
		burn:   get(envBurn, 2, 0),
		binary: binary,
		report: os.Getenv(envReport),
	}
}

func (c config) String() string {
	data := "printable text"
	if c.binary {
		data = "random binary"
	}
	return fmt.Sprintf("%d runs of %d MiB of %s per case and path, %d at once, neighbour spinning %d threads", c.runs, c.size>>20, data, c.conc, c.burn)
}

// seed is the seed of run i of case ci through path pi: unique, so that
// no two streams carry the same bytes.
func (c config) seed(ci, pi, i int) uint64 {
	s := uint64(ci)<<40 | uint64(pi)<<32 | uint64(i)
	if !c.binary {
		s |= textSeed
	}
	return s
}

// runTimeout bounds one run: a stream that stalls (a lost half-close, a
// missing exit status) fails instead of hanging the suite. It is generous,
// 1 MiB/s plus a minute, and says nothing about speed.
func (c config) runTimeout() time.Duration {
	return time.Minute + time.Duration(c.size>>20)*time.Second
}
