// Package e2e drives the real kubectl through a real limen proxy and worker
// against the real control plane of test/cluster.
package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

var shared struct {
	once sync.Once
	env  *gatewaytest.Env
	err  error
}

// gateway returns the shared proxy and worker, starting them on first use.
func gateway(t *testing.T) *gatewaytest.Env {
	t.Helper()
	c := clustertest.Cluster(t)
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "limen-e2e-")
		if err != nil {
			shared.err = err
			return
		}
		// The proxy's store holds every recording of the run: gigabytes.
		// After a failure the logs and audit store stay; recordings go.
		clustertest.AtTeardown(func() {
			if shared.env == nil {
				_ = os.RemoveAll(dir)
				return
			}
			shared.env.Stop()
			if !clustertest.RunFailed() {
				_ = os.RemoveAll(dir)
				return
			}
			for _, d := range []string{recstore.Path(shared.env.ProxyDataDir()), filepath.Join(shared.env.WorkerDataDir(), "recordings")} {
				_ = os.RemoveAll(d)
			}
			fmt.Fprintf(os.Stderr, "limen-e2e: logs and audit store kept in %s\n", dir)
		})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		shared.env, shared.err = gatewaytest.Start(ctx, c, dir, os.Stderr)
	})
	if shared.err != nil {
		t.Fatalf("start limen: %v", shared.err)
	}
	return shared.env
}

// userKubeconfig logs user in once per test binary (the proxy rate-limits
// logins, as it should) and returns their kubeconfig.
func userKubeconfig(t *testing.T, user string) string {
	t.Helper()
	e := gateway(t)
	logins.Lock()
	defer logins.Unlock()
	if kc, ok := logins.kubeconfigs[user]; ok {
		return kc
	}
	kc, err := e.Login(context.Background(), user)
	if err != nil {
		t.Fatalf("login %s: %v", user, err)
	}
	logins.kubeconfigs[user] = kc
	return kc
}

var logins = struct {
	sync.Mutex
	kubeconfigs map[string]string
}{kubeconfigs: map[string]string{}}

// kubectl runs kubectl with a kubeconfig and returns stdout, stderr and the
// exit code.
func kubectl(t *testing.T, kubeconfig, stdin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, clustertest.Kubectl(t, ""), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("kubectl %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// restTLS is the TLS configuration client-go would use for cfg, exec
// plugin credentials included.
func restTLS(cfg *rest.Config) (*tls.Config, error) {
	tc, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	if tc.GetClientCertificate != nil || len(tc.Certificates) > 0 {
		return tc, nil
	}
	return nil, fmt.Errorf("kubeconfig yields no client certificate")
}
