package soak

import (
	"os"
	"testing"
	"time"

	"github.com/limenhq/limen/test/cluster/clustertest"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// The environment variables of a soak run (`make soak` sets them).
const (
	envSoak     = "LIMEN_SOAK"          // set: run; unset: TestSoak skips (not part of make test)
	envDuration = "LIMEN_SOAK_DURATION" // how long the streams are held open (Go duration; default 1h)
	envReport   = "LIMEN_SOAK_REPORT"   // where the markdown report goes (default: only the test log)
	envSample   = "LIMEN_SOAK_SAMPLE"   // how often the processes are sampled (default 1m)
)

// maxDuration keeps a run inside the -timeout `make soak` gives go test.
const maxDuration = 24 * time.Hour

// config is the size of one soak run.
type config struct {
	duration, sample time.Duration
	report           string
}

func loadConfig(t *testing.T) config {
	t.Helper()
	get := func(name string, def, lo, hi time.Duration) time.Duration {
		v := os.Getenv(name)
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < lo || d > hi {
			t.Fatalf("%s=%q: want a duration between %s and %s, such as 1h or 3m", name, v, lo, hi)
		}
		return d
	}
	c := config{
		duration: get(envDuration, time.Hour, time.Minute, maxDuration),
		sample:   get(envSample, time.Minute, 5*time.Second, time.Hour),
		report:   os.Getenv(envReport),
	}
	if dl, ok := t.Deadline(); ok && time.Until(dl) < c.duration+10*time.Minute {
		t.Fatalf("%s=%s does not fit in go test's -timeout (%s left): raise -timeout", envDuration, c.duration, time.Until(dl).Round(time.Second))
	}
	return c
}
