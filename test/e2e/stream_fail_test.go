package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/worker"
	"github.com/limenhq/limen/test/cluster/clustertest"
)

// spewBytes is how much output the failing session asks for: far more than
// the recording may hold.
const spewBytes = 400 << 20

// recordLimit is the largest file this process may write while the session
// runs (RLIMIT_FSIZE): the spool's recording hits it, a real EFBIG from the
// kernel, as a full disk would give.
const recordLimit = 8 << 20

// countWriter counts what kubectl relayed to the user.
type countWriter struct{ n atomic.Int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n.Add(int64(len(p))); return len(p), nil }

// TestStreamRecordingFailureEndsTheStream runs the proxy and worker in this
// process (see hops) with a real spool, makes the recording's file hit a
// size limit mid-session, and checks that the worker ends the stream rather
// than relay output it could not record.
func TestStreamRecordingFailureEndsTheStream(t *testing.T) {
	h := newHops(t)
	c := clustertest.Cluster(t)
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "spew", []string{"sleep", "infinity"}, false)
	spoolDir := filepath.Join(t.TempDir(), "spool")
	spool, err := recording.OpenSpool(spoolDir)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []audit.Event
	h.worker.Spool = spool
	h.worker.Events = func(_ context.Context, ev audit.Event) error {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
		return nil
	}
	if h.worker.Upgrades, err = worker.UpgradeTransport(c.CAFile); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: demo, cluster: {server: %q}}]\n"+
		"users: [{name: alice, user: {}}]\ncontexts: [{name: demo, context: {cluster: demo, user: alice}}]\ncurrent-context: demo\n",
		h.baseURL+"/k8s/demo")
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	limitFileSize(t, recordLimit)
	for _, cl := range execClients {
		t.Run(cl.transport, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := cl.command(t, ctx, kc, "-n", ns, "exec", "spew", "--", "sh", "-c",
				fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a", spewBytes))
			var out countWriter
			cmd.Stdout, cmd.Stderr = &out, io.Discard
			err := cmd.Run()
			var ee *exec.ExitError
			if ctx.Err() != nil || (err != nil && !errors.As(err, &ee)) {
				t.Fatalf("kubectl exec: %v (ctx %v)", err, ctx.Err())
			}
			// kubectl over SPDY (1.29) reports a connection closed without
			// a status as success; the output it got is what matters.
			got := out.n.Load()
			t.Logf("kubectl exited with %v", err)
			if got >= spewBytes {
				t.Fatalf("the user received all %d bytes although the recording failed", got)
			}
			t.Logf("stream ended after %d MiB relayed; recording limit %d MiB", got>>20, recordLimit>>20)
			if got > recordLimit {
				t.Fatalf("relayed %d bytes, more than the %d the recording could hold: output was relayed unrecorded", got, recordLimit)
			}
		})
	}
	// session.end follows the relay's end a moment after kubectl saw it.
	var ends int
	for deadline := time.Now().Add(10 * time.Second); ends < len(execClients) && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		ends = 0
		for _, ev := range events {
			if ev.Type == audit.TypeSessionEnd {
				ends++
			}
		}
		mu.Unlock()
	}
	if ends != len(execClients) {
		t.Fatalf("%d session.end events for %d sessions", ends, len(execClients))
	}
}

// limitFileSize sets RLIMIT_FSIZE for this process until the test ends, with
// SIGXFSZ ignored so a write past it fails with EFBIG instead of killing us.
func limitFileSize(t *testing.T, n uint64) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatalf("getrlimit: %v", err)
	}
	signal.Ignore(syscall.SIGXFSZ)
	lim := syscall.Rlimit{Cur: n, Max: old.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatalf("setrlimit: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old)
		signal.Reset(syscall.SIGXFSZ)
	})
}
