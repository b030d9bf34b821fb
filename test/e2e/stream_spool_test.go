package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/test/cluster/clustertest"
)

// TestRecordingSurvivesWorkerRestart kills the worker (SIGKILL) as soon as
// the recording of a large exec is committed to its spool, while it is
// being uploaded, and checks that the recording reaches the proxy whole once
// the worker is back: the spool keeps it until the proxy confirms its
// SHA-256, and the upload resumes from what the proxy kept.
func TestRecordingSurvivesWorkerRestart(t *testing.T) {
	e := gateway(t)
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "big", []string{"sleep", "infinity"}, false)
	kc := userKubeconfig(t, "alice")
	const size = 64 << 20
	spool := filepath.Join(e.Dir, "worker", "recordings")
	// A recording is committed when the API server's stream ends, and its
	// upload (on a stream of its own, fast) then runs while the user still
	// reads the rest of the output from the worker: waiting for the exec
	// to end lets the upload win. So a process of its own, which this busy
	// test process cannot hold up, kills the worker the moment the
	// recording is committed; the user's exec may then end early, but the
	// recording is whole. If the upload ever wins, the test repeats the
	// exec rather than pass without proof; three wins in a row is a
	// failure.
	for attempt := 1; ; attempt++ {
		stamp := filepath.Join(t.TempDir(), "stamp")
		if err := os.WriteFile(stamp, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		killer := exec.Command("sh", "-c", `until [ -n "$(find "$1" -name '*.cast' -newer "$2" 2>/dev/null)" ]; do sleep 0.001; done; kill -9 "$3"`,
			"killer", spool, stamp, strconv.Itoa(e.WorkerPID()))
		if err := killer.Start(); err != nil {
			t.Fatal(err)
		}
		killed := make(chan struct{})
		go func() { _ = killer.Wait(); close(killed) }()
		cmd := exec.Command(clustertest.Kubectl(t, ""), "--kubeconfig", kc, "-n", ns, "exec", "big", "--",
			"sh", "-c", "head -c 67108864 /dev/zero | tr '\\0' a; echo; echo spool-end-marker")
		var out bytes.Buffer
		cmd.Stdout = &out
		err := cmd.Run()
		select {
		case <-killed:
		case <-time.After(10 * time.Second):
			_ = killer.Process.Kill()
			<-killed
		}
		e.KillWorker()
		if err == nil && out.Len() != size+len("\nspool-end-marker\n") {
			t.Fatalf("exec ended cleanly with %d bytes, want %d", out.Len(), size+len("\nspool-end-marker\n"))
		}
		pending, _ := filepath.Glob(filepath.Join(spool, "*.cast"))
		t.Logf("attempt %d: exec %v with %d bytes; recordings still in the worker's spool when it was killed: %d; bytes the proxy held of uploads: %d",
			attempt, err, out.Len(), len(pending), partBytes(filepath.Join(recstore.Path(proxyDataDir(t)), "*", "*.cast.part")))
		if len(pending) > 0 {
			break
		}
		if attempt == 3 {
			t.Fatal("the upload finished before the worker was killed three times: the restart was never tested")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = e.StartWorker(ctx, "")
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

// partBytes adds up the sizes of the uploads in progress matching glob.
func partBytes(glob string) int64 {
	var n int64
	ms, _ := filepath.Glob(glob)
	for _, m := range ms {
		if fi, err := os.Stat(m); err == nil {
			n += fi.Size()
		}
	}
	return n
}
