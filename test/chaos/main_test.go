// Package chaos crashes Limen's parts under load and checks what survives:
// kill -9 of the worker, of the proxy and of the control plane's API
// server, each restarted, and a pod deleted under open streams. Each
// scenario runs the load of test/load through one proxy and one worker,
// measures what the clients saw and how long until service returned, and
// checks the invariants afterwards: every success audited exactly once, no
// stream passed for complete or lost bytes, each exec's recording holds
// every line its client received, and each stream has exactly one
// session.end whose reason is what happened.
//
// `make chaos` runs every scenario (LIMEN_CHAOS=1); a plain go test runs
// the worker kill alone.
package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// Env names the variable that, set to 1, runs every scenario; unset, only
// the worker kill runs (the slice of `make test`).
const Env = "LIMEN_CHAOS"

// full skips a scenario outside `make chaos`.
func full(t *testing.T) {
	t.Helper()
	if os.Getenv(Env) != "1" {
		t.Skip(Env + " is not 1: this scenario runs in make chaos")
	}
}

var shared struct {
	once sync.Once
	env  *gatewaytest.Env
	kc   string // alice's kubeconfig
	err  error
}

// gateway returns the proxy and worker every scenario shares, starting
// them on first use, and alice's kubeconfig (the proxy rate-limits logins).
func gateway(t *testing.T) (*gatewaytest.Env, string) {
	t.Helper()
	c := clustertest.Cluster(t)
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "limen-chaos-")
		if err != nil {
			shared.err = err
			return
		}
		clustertest.AtTeardown(func() {
			if shared.env != nil {
				shared.env.Stop()
			}
			if !clustertest.RunFailed() {
				_ = os.RemoveAll(dir)
				return
			}
			if shared.env != nil {
				_ = os.RemoveAll(recstore.Path(shared.env.ProxyDataDir()))
				_ = os.RemoveAll(filepath.Join(shared.env.WorkerDataDir(), "recordings"))
			}
			fmt.Fprintf(os.Stderr, "limen-chaos: logs and audit store kept in %s\n", dir)
		})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		shared.env, shared.err = gatewaytest.Start(ctx, c, dir, os.Stderr)
		if shared.err == nil {
			shared.kc, shared.err = shared.env.Login(ctx, "alice")
		}
	})
	if shared.err != nil {
		t.Fatalf("start limen: %v", shared.err)
	}
	return shared.env, shared.kc
}
