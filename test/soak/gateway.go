package soak

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/test/cluster/controlplane"
	"github.com/limenhq/limen/test/gatewaytest"
)

// StartGateway starts a proxy and worker of their own for the test named
// name, each serving pprof on a loopback port for the probes, the proxy
// with proxyArgs too; their logs are kept when the test fails.
func StartGateway(t *testing.T, c *controlplane.Cluster, name string, proxyArgs ...string) (*gatewaytest.Env, []Probe) {
	t.Helper()
	dir, err := os.MkdirTemp("", "limen-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	pd, err1 := FreeAddr()
	wd, err2 := FreeAddr()
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, err := gatewaytest.StartWith(ctx, c, dir, os.Stderr, gatewaytest.Options{
		ProxyArgs: append([]string{"--debug-listen", pd}, proxyArgs...), WorkerArgs: []string{"--debug-listen", wd}})
	if err != nil {
		t.Fatalf("start limen: %v (logs in %s)", err, dir)
	}
	t.Cleanup(func() {
		env.Stop()
		if t.Failed() {
			_ = os.RemoveAll(recstore.Path(env.ProxyDataDir()))
			t.Logf("limen's logs and audit store are kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return env, []Probe{{Name: "proxy", PID: env.ProxyPID, Debug: pd}, {Name: "worker", PID: env.WorkerPID, Debug: wd}}
}
