package chaos

import (
	"context"
	"testing"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
)

// TestCrashWorker kills the worker (kill -9) while the load runs through
// it, then starts it again. The worker cannot record the end of the
// streams it carried, so the proxy does, as worker_lost; the worker, back,
// records no second end; the recordings it recovers hold every line the
// client received. This is the slice of the chaos scenarios that runs in
// make test.
func TestCrashWorker(t *testing.T) {
	lost := end{audit.EndWorkerLost, audit.HopProxy}
	crashUnderLoad(t, crash{
		name:       "kill -9 of the worker, restarted",
		kill:       func(t *testing.T, e *gatewaytest.Env) { e.KillWorker() },
		restart:    restartWorker,
		want:       map[string]end{"exec": lost, "watch": lost, "portforward": lost},
		execSays:   "Limen: the worker of cluster demo was lost mid-stream",
		streamsEnd: true,
	})
}

func restartWorker(t *testing.T, e *gatewaytest.Env) {
	if err := e.RestartWorker(context.Background()); err != nil {
		t.Fatalf("start the worker again: %v", err)
	}
}

// TestCrashProxy kills the proxy (kill -9) while the load runs through it,
// then starts it again on the same address and data. The proxy cannot
// record the end of the streams it relayed, so the worker does, as
// proxy_lost, and delivers it once the proxy is back.
func TestCrashProxy(t *testing.T) {
	full(t)
	lost := end{audit.EndProxyLost, audit.HopWorker}
	var tunnels int
	crashUnderLoad(t, crash{
		name: "kill -9 of the proxy, restarted",
		kill: func(t *testing.T, e *gatewaytest.Env) {
			tunnels = e.Tunnels(0)
			e.KillProxyN(0)
		},
		restart: func(t *testing.T, e *gatewaytest.Env) {
			ctx := context.Background()
			if err := e.StartProxyN(ctx, 0); err != nil {
				t.Fatalf("start the proxy again: %v", err)
			}
			if err := e.WaitTunnel(ctx, 0, tunnels+1); err != nil {
				t.Fatalf("the worker's tunnel is not back: %v", err)
			}
		},
		want:       map[string]end{"exec": lost, "watch": lost, "portforward": lost},
		streamsEnd: true,
	})
}

// TestCrashAPIServer kills the control plane's API server (kill -9) while
// the load runs, then starts it again. The worker sees the API server's
// connection break and says so in each stream's session.end.
func TestCrashAPIServer(t *testing.T) {
	full(t)
	reset := end{audit.EndUpstreamReset, audit.HopWorker}
	// clustertest.Cluster fails a test once a component is down: taken
	// before the kill.
	c := clustertest.Cluster(t)
	crashUnderLoad(t, crash{
		name: "kill -9 of the API server, restarted",
		kill: func(t *testing.T, e *gatewaytest.Env) { c.KillAPIServer() },
		restart: func(t *testing.T, e *gatewaytest.Env) {
			if err := c.RestartAPIServer(context.Background()); err != nil {
				t.Fatalf("start the API server again: %v", err)
			}
		},
		// The exec lost its exit status: truncated, and the worker tells
		// the client so. The port-forward's end is not judged: the API
		// server's connection closes in good order when it dies, and the
		// worker reports that as completed (the figures say what it said).
		want:       map[string]end{"exec": {audit.EndTruncated, audit.HopWorker}, "watch": reset},
		streamsEnd: true,
	})
}
