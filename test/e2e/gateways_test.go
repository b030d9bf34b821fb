package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
)

// extraGateway starts a second proxy and worker on the test cluster, with
// options the shared gateway must not have (its grants, its worker's
// identity at the cluster), and stops them when the test ends.
func extraGateway(t *testing.T, what string, opts gatewaytest.Options) *gatewaytest.Env {
	t.Helper()
	shared := gateway(t)
	dir, err := os.MkdirTemp("", "limen-e2e-extra-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts.Bin = shared.Bin
	e, err := gatewaytest.StartWith(ctx, clustertest.Cluster(t), dir, os.Stderr, opts)
	if err != nil {
		t.Fatalf("start a proxy and worker with %s: %v", what, err)
	}
	t.Cleanup(func() {
		e.Stop()
		_ = os.RemoveAll(dir)
	})
	return e
}

// login logs user in through e and returns their kubeconfig.
func login(t *testing.T, e *gatewaytest.Env, user string) string {
	t.Helper()
	kc, err := e.Login(context.Background(), user)
	if err != nil {
		t.Fatalf("login %s: %v", user, err)
	}
	return kc
}

// eventually retries f until it returns "" or ten seconds have passed (RBAC
// changes reach the API server's authorizer through an informer, not at
// once), and fails the test with f's last complaint.
func eventually(t *testing.T, f func() string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		msg := f()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
