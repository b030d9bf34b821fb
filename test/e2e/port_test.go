package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
)

// portDeadline is the read and write deadline of deadlineGateway's port.
const portDeadline = time.Second

// deadlineGateway starts a second proxy and worker on the test cluster
// whose TLS port has read and write deadlines of portDeadline (the
// shared proxy keeps the defaults, which the other tests' requests must
// not meet).
func deadlineGateway(t *testing.T) *gatewaytest.Env {
	t.Helper()
	shared := gateway(t)
	dir, err := os.MkdirTemp("", "limen-e2e-port-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := portDeadline.String()
	e, err := gatewaytest.StartWith(ctx, clustertest.Cluster(t), dir, os.Stderr, gatewaytest.Options{
		Bin: shared.Bin, ProxyArgs: []string{"--read-timeout", d, "--write-timeout", d, "--read-header-timeout", d},
	})
	if err != nil {
		t.Fatalf("start a proxy with %s deadlines: %v", d, err)
	}
	t.Cleanup(func() {
		e.Stop()
		_ = os.RemoveAll(dir)
	})
	return e
}

// TestStreamsOutliveThePortDeadlines: through a proxy whose port has 1 s
// read and write deadlines, kubectl's watch, logs -f and exec (SPDY and
// WebSocket) keep delivering long after them, since a stream lasts as long
// as its grant; a plain request is answered as usual.
func TestStreamsOutliveThePortDeadlines(t *testing.T) {
	e := deadlineGateway(t)
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "ticker", []string{"sh", "-c", "i=0; while true; do i=$((i+1)); echo tick-$i; sleep 1; done"}, false)
	kc, err := e.Login(context.Background(), "alice")
	if err != nil {
		t.Fatalf("login alice: %v", err)
	}
	if out, errOut, code := kubectl(t, kc, "", "-n", ns, "get", "configmaps"); code != 0 {
		t.Fatalf("kubectl get through the proxy: %d %s %s", code, out, errOut)
	}

	start := func(bin string, args ...string) (*lockedBuffer, <-chan error) {
		t.Helper()
		var out, errb lockedBuffer
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", kc, "-n", ns}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			err := cmd.Wait()
			if err != nil && ctx.Err() == nil {
				t.Logf("kubectl %v: %v: %s", args, err, errb.String())
			}
			done <- err
		}()
		t.Cleanup(cancel)
		return &out, done
	}
	newest := clustertest.Kubectl(t, "")
	seen := sessionIDs(t, e)
	watch, watchDone := start(newest, "get", "configmaps", "-w", "-o", "name")
	logs, logsDone := start(newest, "logs", "-f", "ticker")
	late := fmt.Sprintf("sleep %d; echo late-output", int((3 * portDeadline).Seconds()))
	type execRun struct {
		name string
		out  *lockedBuffer
		done <-chan error
	}
	execs := []execRun{}
	for _, c := range []struct{ name, bin string }{{"WebSocket", newest}, {"SPDY", spdyKubectl(t)}} {
		if c.bin == "" {
			continue
		}
		out, done := start(c.bin, "exec", "ticker", "--", "sh", "-c", late)
		execs = append(execs, execRun{c.name, out, done})
	}
	waitNewSessions(t, e, seen, []sessions.Kind{sessions.KindWatch, sessions.KindLogs})
	opened := time.Now()

	// Past the deadlines, every stream still delivers.
	time.Sleep(time.Until(opened.Add(3 * portDeadline)))
	c := clustertest.Cluster(t)
	if _, err := c.Client.CoreV1().ConfigMaps(ns).Create(context.Background(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := lastTick(logs.String())
	wait := func(what string, ok func() bool, done <-chan error) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for !ok() {
			select {
			case err := <-done:
				if !ok() {
					t.Fatalf("%s: kubectl ended (%v) %s after the stream opened, before delivering", what, err, time.Since(opened).Round(time.Millisecond))
				}
				return
			case <-deadline:
				t.Fatalf("%s: nothing delivered within 30s", what)
			case <-time.After(50 * time.Millisecond):
			}
		}
		t.Logf("%s: delivered %s after the stream opened", what, time.Since(opened).Round(time.Millisecond))
	}
	wait("watch", func() bool { return strings.Contains(watch.String(), "configmap/late") }, watchDone)
	wait("logs -f", func() bool { return lastTick(logs.String()) > before }, logsDone)
	for _, x := range execs {
		wait("exec over "+x.name, func() bool { return strings.Contains(x.out.String(), "late-output") }, x.done)
		if err := <-x.done; err != nil {
			t.Fatalf("exec over %s: %v", x.name, err)
		}
	}
}

// spdyKubectl is a kubectl that runs exec over SPDY (1.29 or older), or ""
// when none is installed.
func spdyKubectl(t *testing.T) string {
	for _, v := range clustertest.Versioned() {
		if v.Minor == "1.29" || v.Minor == "1.28" || v.Minor == "1.27" {
			return v.Path
		}
	}
	t.Log("no kubectl 1.27-1.29 installed: exec over SPDY not covered")
	return ""
}

// lastTick is the number of the last "tick-N" line in out, 0 before any.
func lastTick(out string) int {
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "tick-"); ok {
			if i, err := strconv.Atoi(v); err == nil {
				n = max(n, i)
			}
		}
	}
	return n
}
