package e2e

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/test/cluster/clustertest"
)

// TestLockTellsTheExecWhy: a kubectl exec that a lock ends exits non-zero
// and prints why, over WebSocket and over SPDY (kubectl 1.29), whichever hop
// the lock reaches first. Before, the proxy closed the client's connection
// without a word when the lock reached it first: kubectl printed only
// "close 1006" over WebSocket, and over SPDY exited 0, as if the command had
// succeeded (make crowd: 100 of 100 SPDY execs).
func TestLockTellsTheExecWhy(t *testing.T) {
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "sleeper", []string{"sh", "-c", "sleep 3600"}, false)
	kc := userKubeconfig(t, "alice")
	for _, c := range execClients {
		t.Run(c.transport, func(t *testing.T) {
			t.Cleanup(func() { _, _ = gateway(t).Limen(context.Background(), "admin", "", "unlock", "alice") })
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := c.command(t, ctx, kc, "-n", ns, "exec", "-i", "sleeper", "--", "sh", "-c", "sleep 3600")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			stdin, err := cmd.StdinPipe() // held open: the exec waits on it
			if err != nil {
				t.Fatal(err)
			}
			defer stdin.Close()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			waitOpen(t, "exec", 1)
			admin(t, "lock", "alice", "--reason", "incident 43")
			var werr error
			select {
			case werr = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("exec still running 5s after the lock")
			}
			var exit *exec.ExitError
			if !errors.As(werr, &exit) || exit.ExitCode() == 0 {
				t.Fatalf("kubectl exec (%s) after a lock: %v, stderr %q; want a non-zero exit", c.transport, werr, stderr.String())
			}
			if !strings.Contains(stderr.String(), "locked") || !strings.Contains(stderr.String(), "incident 43") {
				t.Fatalf("kubectl exec (%s) after a lock: exit %d, stderr %q; want the lock and its reason", c.transport, exit.ExitCode(), stderr.String())
			}
			t.Logf("%s: exit %d: %s", c.transport, exit.ExitCode(), strings.TrimSpace(stderr.String()))
		})
	}
}
