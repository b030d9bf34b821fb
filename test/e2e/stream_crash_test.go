package e2e

import (
	"bufio"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/test/cluster/clustertest"
)

// TestRecordingHoldsWhatTheUserSawAfterAKill is issue #32: kill -9 of the
// worker while kubectl exec prints a line every 100 ms. Output is written
// to the recording before it is relayed, so the recording recovered when
// the worker is back holds every line kubectl printed (it once ended a
// line short: the spool held up to 200 ms of output in memory).
func TestRecordingHoldsWhatTheUserSawAfterAKill(t *testing.T) {
	e := gateway(t)
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "ticker", []string{"sleep", "infinity"}, false)
	kc := userKubeconfig(t, "alice")
	cmd := exec.Command(clustertest.Kubectl(t, ""), "--kubeconfig", kc, "-n", ns, "exec", "ticker", "--",
		"sh", "-c", `i=0; while [ $i -lt 600 ]; do echo tick-$i; i=$((i+1)); sleep 0.1; done`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	var last string
	for lines.Scan() {
		last = lines.Text()
		if last == "tick-20" {
			e.KillWorker() // the moment kubectl has printed a line
		}
	}
	_ = cmd.Wait()
	if !strings.HasPrefix(last, "tick-") {
		t.Fatalf("kubectl printed %q last; want ticks", last)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.StartWorker(ctx, ""); err != nil {
		t.Fatal(err)
	}
	_, evs := castEvents(t, fetchRecording(t, sessionOnPod(t, ns, "ticker")))
	rec := castOutput(evs)
	if !strings.Contains(rec, last+"\r\n") {
		tail := rec[max(0, len(rec)-40):]
		t.Fatalf("kubectl printed %s before the worker died, the recovered recording ends %q", last, tail)
	}
	t.Logf("kubectl printed up to %s; the recording holds it", last)
}
