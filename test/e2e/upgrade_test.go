package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
)

// Issue 19 item 4, "upgrades lose nothing": a rolling update of the
// chart's worker Deployment and a restart of the proxy each end the
// sessions of the stopped process cleanly — kubectl's stream ends, the one
// session.end says shutdown, the recording reaches the proxy whole — and
// no request fails while the worker rolls.

// counting is the command the sessions run: a line every 100 ms.
var counting = []string{"sh", "-c", "i=0; while true; do echo line-$i; i=$((i+1)); sleep 0.1; done"}

// liveExec is a kubectl exec through Limen that prints until it is ended.
type liveExec struct {
	id     string
	stdout *lockedBuffer
	stderr *lockedBuffer
	done   <-chan error
}

// startCountingExec runs counting in a pod of its own through kubeconfig
// and waits until it prints through both hops and e lists its session.
func startCountingExec(t *testing.T, e *gatewaytest.Env, kubeconfig string) liveExec {
	t.Helper()
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "target", []string{"sh", "-c", "sleep 3600"}, false)
	cmd := exec.Command(clustertest.Kubectl(t, ""), append([]string{"--kubeconfig", kubeconfig, "-n", ns, "exec", "target", "--"}, counting...)...)
	x := liveExec{stdout: &lockedBuffer{}, stderr: &lockedBuffer{}}
	cmd.Stdout, cmd.Stderr = x.stdout, x.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	x.done = done
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(x.stdout.String(), "line-5\n") {
		if time.Now().After(deadline) {
			t.Fatalf("kubectl exec through Limen printed no output within 30s: %q %q", x.stdout, x.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, i := range listSessions(t, e) {
		if i.Live() && i.Kind == sessions.KindExec {
			x.id = i.ID
		}
	}
	if x.id == "" {
		t.Fatalf("the exec is not listed live:\n%s", adminOn(t, e, "sessions", "ls"))
	}
	return x
}

// ended waits for kubectl to end, which the drain must cause within its
// timeout, and returns what it printed.
func (x liveExec) ended(t *testing.T, within time.Duration) string {
	t.Helper()
	select {
	case err := <-x.done:
		t.Logf("kubectl exec ended (%v) after %d bytes; stderr %q", err, len(x.stdout.String()), x.stderr.String())
	case <-time.After(within):
		t.Fatalf("kubectl exec still runs %s after the stop began", within)
	}
	// Ended cleanly: the user reads why, not a broken connection.
	if !strings.Contains(x.stderr.String(), "Limen is shutting down") {
		t.Fatalf("kubectl exec did not say Limen was shutting down: stderr %q", x.stderr.String())
	}
	return x.stdout.String()
}

// checkNothingLost asserts that session id was told to its end in e's
// audit trail (one session.end, reason shutdown) and that its recording
// reached e's store with every byte kubectl printed.
func checkNothingLost(t *testing.T, e *gatewaytest.Env, id, printed string) {
	t.Helper()
	st, err := audit.Open(context.Background(), audit.Path(e.ProxyDataDir()), audit.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := storyIn(t, st, id)
	s.check(t, sessions.KindExec, nil)
	if end := s.end(); end.EndReason != audit.EndShutdown || end.EndHop == "" {
		t.Fatalf("session %s's session.end says %q by %q (%q); want shutdown", id, end.EndReason, end.EndHop, end.EndDetail)
	}
	_, evs := castEvents(t, fetchRecordingIn(t, e.ProxyDataDir(), id))
	rec := castOutput(evs)
	if printed == "" || !strings.HasPrefix(rec, shownByTerminal(printed)) {
		t.Fatalf("the recording of session %s holds %d bytes of output, not all the %d kubectl printed:\nrecorded %q\nprinted  %q",
			id, len(rec), len(printed), tail(rec), tail(printed))
	}
	t.Logf("session %s: session.end %s by the %s; recording has all %d bytes kubectl printed (%d in all)", id, audit.EndShutdown, s.end().EndHop, len(printed), len(rec))
}

func tail(s string) string { return s[max(0, len(s)-80):] }

// requestLoop gets a pod through Limen every 100 ms until stop is called,
// and counts the failures.
func requestLoop(t *testing.T, kubeconfig string) (stop func() (ok, failed int, last error)) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var okN, failN atomic.Int64
	var mu sync.Mutex
	var lastErr error
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := client.CoreV1().Namespaces().Get(rctx, "default", metav1.GetOptions{})
			rcancel()
			switch {
			case ctx.Err() != nil:
			case err != nil:
				failN.Add(1)
				mu.Lock()
				lastErr = err
				mu.Unlock()
			default:
				okN.Add(1)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return func() (int, int, error) {
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return int(okN.Load()), int(failN.Load()), lastErr
	}
}

// TestWorkerRollingUpdateLosesNothing rolls the chart's worker Deployment
// (persistence off: the update rolls, new pod first) while a kubectl exec
// runs through it and a client sends a request every 100 ms. The old
// worker hands new streams over to the new one once it has connected,
// ends the exec (whose session.end and whole recording reach the proxy
// before the pod, and its emptyDir spool, are gone), and no request fails.
func TestWorkerRollingUpdateLosesNothing(t *testing.T) {
	e := extraGateway(t, "a worker rolled as a Deployment", gatewaytest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ns := restrictedNamespace(t)
	manifest := chartWorker(t, ctx, e, ns)
	applyChart(t, ns, manifest)
	old := waitWorkerPod(t, ctx, ns)
	if err := e.WaitWorker(ctx, true); err != nil {
		t.Fatalf("%v (pod %s/%s: %s)", err, ns, old, podLog(clustertest.Cluster(t), ns, old))
	}
	var deployment, secret string
	for _, o := range decodeAll(t, manifest) {
		name := o["metadata"].(map[string]any)["name"].(string)
		switch o["kind"] {
		case "Deployment":
			deployment = name
		case "Secret":
			secret = name
		}
	}
	kc := login(t, e, "admin")
	x := startCountingExec(t, e, kc)
	stop := requestLoop(t, kc)

	// The old pod's join token is spent and its emptyDir goes with it: the
	// new pod enrolls with a new token, as the chart's values say.
	patch := `{"stringData":{"token":"` + joinToken(t, ctx, e) + `"}}`
	if _, errb, err := adminKubectl(t, "", "-n", ns, "patch", "secret", secret, "--type", "merge", "-p", patch); err != nil {
		t.Fatalf("put a new join token in the Secret: %v %s", err, errb)
	}
	began := time.Now()
	if _, errb, err := adminKubectl(t, "", "-n", ns, "rollout", "restart", "deployment/"+deployment); err != nil {
		t.Fatalf("kubectl rollout restart: %v %s", err, errb)
	}
	if out, errb, err := adminKubectl(t, "", "-n", ns, "rollout", "status", "deployment/"+deployment, "--timeout", "3m"); err != nil {
		t.Fatalf("kubectl rollout status: %v %s %s", err, out, errb)
	}
	printed := x.ended(t, time.Minute)
	// The old pod is gone once its drain is over; the requests keep going
	// until then and a while after.
	c := clustertest.Cluster(t)
	for {
		if _, err := c.Client.CoreV1().Pods(ns).Get(ctx, old, metav1.GetOptions{}); err != nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the old worker pod %s never went away", old)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Second) // requests against the new worker alone
	ok, failed, last := stop()
	t.Logf("rollout and drain took %s; requests through Limen meanwhile: %d ok, %d failed", time.Since(began).Round(time.Millisecond), ok, failed)
	if failed > 0 || ok == 0 {
		t.Fatalf("%d requests failed (and %d succeeded) while the worker rolled; the last error: %v", failed, ok, last)
	}
	if pod := waitWorkerPod(t, ctx, ns); pod == old {
		t.Fatalf("the worker pod is still %s after the rollout", old)
	}
	checkNothingLost(t, e, x.id, printed)
}

// TestProxyRestartLosesNothing stops the proxy with SIGTERM while a
// kubectl exec runs through it, as the chart's Recreate update does, and
// starts it again on the same data directory (the chart's volume). The
// exec ends; its session.end, stored before the old proxy exits, says the
// proxy shut down; its recording reaches the store whole.
func TestProxyRestartLosesNothing(t *testing.T) {
	e := extraGateway(t, "a proxy that restarts", gatewaytest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kc := login(t, e, "admin")
	x := startCountingExec(t, e, kc)

	e.StopProxy()
	printed := x.ended(t, 10*time.Second)
	log, err := os.ReadFile(filepath.Join(e.Dir, "proxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "proxy drained") {
		t.Fatalf("the proxy did not report a complete drain; its log:\n%s", log)
	}
	if err := e.StartProxy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.WaitWorker(ctx, true); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := kubectl(t, kc, "", "get", "namespace", "default"); code != 0 {
		t.Fatalf("kubectl through the restarted proxy: %s", stderr)
	}
	checkNothingLost(t, e, x.id, printed)
}
