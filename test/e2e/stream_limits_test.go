package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/test/cluster/clustertest"
)

// TestFullSpoolRefusesExecAndEndsSessions restarts the shared worker with a
// 1 MiB recording spool that a file of the operator's fills (the worker
// counts every byte in its spool), as when the proxy's recording store is
// full and recordings pile up. An exec is refused before it starts, with a
// message naming the limit, and leaves no mark and no session.start; with
// room for a session to start but not for its output, the session is ended
// when the spool fills, kubectl fails with the spool's message, having
// received no more than the recording holds, and session.end says the
// recording failed. Nothing is cut silently.
func TestFullSpoolRefusesExecAndEndsSessions(t *testing.T) {
	e := gateway(t)
	const limit = 1 << 20
	filler := filepath.Join(e.WorkerDataDir(), "recordings", "operator-filler")
	fill := func(n int) {
		t.Helper()
		if err := os.WriteFile(filler, bytes.Repeat([]byte("f"), n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fill(limit - 16<<10) // less room than one minimal recording (64 KiB)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.RestartWorker(ctx, "--recording-spool-max-bytes", "1Mi", "--recording-max-bytes", "1Mi"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.Remove(filler)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.RestartWorker(ctx); err != nil {
			t.Errorf("restart the worker without the spool limit: %v", err)
		}
	})
	kc := userKubeconfig(t, "alice")
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "limits", []string{"sleep", "infinity"}, false)
	cl := execClients[0]

	mark := filepath.Join(t.TempDir(), "full-spool")
	starts := sessionStarts(t, ns, "limits")
	_, stderr, code := cl.run(t, kc, "", "-n", ns, "exec", "limits", "--", "touch", mark)
	t.Logf("kubectl exit %d: %s", code, strings.TrimSpace(stderr))
	assertNoMark(t, mark)
	if code == 0 || !strings.Contains(stderr, "recording spool is full (its limit, recording-spool-max-bytes, is 1 MiB), so Limen did not start the session") {
		t.Fatalf("exec with the spool full: exit %d, stderr %q; want a refusal naming the spool's limit", code, stderr)
	}
	if n := sessionStarts(t, ns, "limits") - starts; n != 0 {
		t.Fatalf("%d session.start events for the refused exec", n)
	}
	if ev := lastKubeRequest(t, ns, "limits"); ev.Kube.Status != 503 || ev.Kube.Subresource != "exec" {
		t.Fatalf("kube.request of the refused exec = %+v, want status 503", ev.Kube)
	}

	// Room for a session to start (256 KiB), not for its 1 MiB of output.
	fill(limit - 256<<10)
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := cl.command(t, ctx, kc, "-n", ns, "exec", "limits", "--", "sh", "-c", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a", limit))
	var out countWriter
	var errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if ctx.Err() != nil || !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("kubectl exec: %v (ctx %v), want a non-zero exit; stderr: %s", err, ctx.Err(), errOut.String())
	}
	t.Logf("kubectl exited %d after %d bytes of output; stderr: %s", ee.ExitCode(), out.n.Load(), strings.TrimSpace(errOut.String()))
	if msg := errOut.String(); !strings.Contains(msg, "recording spool is full") || !strings.Contains(msg, "1 MiB") {
		t.Errorf("kubectl's message %q does not say the spool is full", msg)
	}
	id := sessionOnPod(t, ns, "limits")
	end := waitSessionEnd(t, "alice", "limits", func(ev audit.Event) bool { return ev.SessionID == id })
	if end.Session.EndReason != audit.EndRecordFailed || !strings.Contains(end.Session.EndDetail, "spool") {
		t.Errorf("session.end %q (%q), want %q naming the spool", end.Session.EndReason, end.Session.EndDetail, audit.EndRecordFailed)
	}
	rec := fetchRecording(t, id)
	_, evs := castEvents(t, rec)
	if got, recorded := out.n.Load(), int64(len(castOutput(evs))); got > recorded || recorded >= limit {
		t.Errorf("kubectl received %d bytes, the recording holds %d of the %d written: want no more relayed than recorded, and the recording cut", got, recorded, limit)
	}
}
