// Package faults injects faults into a running Limen under load and checks,
// after each, the same invariants: every request a client saw served is in
// the audit trail exactly once, no exec output reached a user that its
// recording lacks, and the system serves again by itself once the fault is
// gone. The faults: the audit store's, the recording spool's and the
// recording store's disk full; the policy bundle server failing in every
// way it can; the worker's ServiceAccount token rotated, revoked and made
// unreadable; the worker's clock an hour off.
//
// `go test ./test/faults` runs a short slice (the bundle server answering
// 500s, about a minute); LIMEN_CHAOS=1 runs every scenario (`make chaos`),
// about eight minutes. Each scenario writes a figures line to the file
// CHAOS_REPORT names, if set.
package faults

import (
	"os"
	"testing"
	"time"

	"github.com/limenhq/limen/test/cluster/clustertest"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// chaosEnv, set to 1, runs every scenario in full.
const chaosEnv = "LIMEN_CHAOS"

// full reports whether the whole package runs (LIMEN_CHAOS=1) rather than
// the slice `go test ./...` runs.
func full() bool { return os.Getenv(chaosEnv) == "1" }

// needFull skips a scenario that only LIMEN_CHAOS=1 runs.
func needFull(t *testing.T) {
	t.Helper()
	if !full() {
		t.Skip(chaosEnv + "=1 runs this scenario (make chaos); go test ./... runs only the bundle server's 500s")
	}
}

// span is d in a full run and short in the slice.
func span(d, short time.Duration) time.Duration {
	if full() {
		return d
	}
	return short
}
