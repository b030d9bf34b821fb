package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/test/cluster/clustertest"
)

// TestRecordingSurvivesWorkerRestart kills the worker (SIGKILL) as soon as
// a large recorded exec ends, while its recording is still being uploaded,
// and checks that the recording reaches the proxy whole once the worker is
// back: the spool keeps it until the proxy confirms its SHA-256.
func TestRecordingSurvivesWorkerRestart(t *testing.T) {
	e := gateway(t)
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "big", []string{"sleep", "infinity"}, false)
	kc := userKubeconfig(t, "alice")
	const size = 64 << 20
	// The upload of a 64 MiB recording takes a while after the exec ends,
	// so the worker is nearly always killed while it is still spooled. If
	// the upload ever wins, the test repeats the exec rather than pass
	// without proof; three wins in a row is a failure.
	for attempt := 1; ; attempt++ {
		cmd := exec.Command(clustertest.Kubectl(t, ""), "--kubeconfig", kc, "-n", ns, "exec", "big", "--",
			"sh", "-c", "head -c 67108864 /dev/zero | tr '\\0' a; echo; echo spool-end-marker")
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := cmd.Run(); err != nil || out.Len() != size+len("\nspool-end-marker\n") {
			t.Fatalf("exec: %v, %d bytes", err, out.Len())
		}
		e.KillWorker()
		pending, _ := filepath.Glob(filepath.Join(e.Dir, "worker", "recordings", "*.cast"))
		t.Logf("attempt %d: recordings still in the worker's spool when it was killed: %d", attempt, len(pending))
		if len(pending) > 0 {
			break
		}
		if attempt == 3 {
			t.Fatal("the upload finished before the worker was killed three times: the restart was never tested")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := e.StartWorker(ctx, "")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.StartWorker(ctx, ""); err != nil {
		t.Fatal(err)
	}
	id := sessionOnPod(t, ns, "big")
	rec := fetchRecording(t, id)
	if !bytes.Contains(rec, []byte("spool-end-marker")) {
		t.Fatalf("recording %s (%d bytes) lacks the end of the output", id, len(rec))
	}
	_, evs := castEvents(t, rec)
	if got := len(castOutput(evs)); got < size {
		t.Fatalf("recording holds %d output bytes, want at least %d", got, size)
	}
}

// sessionOnPod returns the id of the newest session.start on a pod.
func sessionOnPod(t *testing.T, ns, pod string) string {
	t.Helper()
	ctx := context.Background()
	st, err := audit.Open(ctx, audit.Path(proxyDataDir(t)), audit.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	evs, err := st.Search(ctx, audit.Query{Type: audit.TypeSessionStart, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if s := evs[i].Session; s != nil && s.Namespace == ns && s.Pod == pod {
			return evs[i].SessionID
		}
	}
	t.Fatalf("no session.start on %s/%s", ns, pod)
	return ""
}
