package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/test/cluster/clustertest"
)

// blobSize is what each run moves: the size at which the truncation of
// issue #11 showed.
const blobSize = 64 << 20

// blobExit is the exit code of the download command: it must arrive after
// all the bytes.
const blobExit = 7

// streamRuns is how many runs per transport and direction; LIMEN_STREAM_RUNS
// raises it.
func streamRuns(t *testing.T) int {
	if s := os.Getenv("LIMEN_STREAM_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("LIMEN_STREAM_RUNS=%q: want a positive number", s)
		}
		return n
	}
	return 3
}

// TestStreamBytesExact moves 64 MiB out of a pod (cat, then exit 7) and
// into it (stdin to sha256sum) through Limen, with recording on, over
// WebSocket (the newest kubectl) and SPDY (kubectl 1.29), several times.
// Each run must deliver exactly the bytes of the direct run: same count,
// same SHA-256, same exit code; session.end must say the stream completed.
// LIMEN_STREAM_BURN=1 adds a CPU-burning neighbour on every core, the
// condition under which issue #11's truncation showed (make stress runs
// that matrix at length).
func TestStreamBytesExact(t *testing.T) {
	kc := userKubeconfig(t, "alice")
	c := clustertest.Cluster(t)
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "bytes", []string{"sleep", "infinity"}, false)
	blob := make([]byte, blobSize)
	rng := rand.NewChaCha8([32]byte{11})
	_, _ = rng.Read(blob)
	sum := sha256.Sum256(blob)
	want := hex.EncodeToString(sum[:])

	newest := streamClient{transport: "websocket"}
	// The blob goes into the pod directly, as the cluster admin.
	if _, stderr, code := newest.runBytes(t, c.Kubeconfig, blob, "-n", ns, "exec", "-i", "bytes", "--", "sh", "-c", "cat > blob"); code != 0 {
		t.Fatalf("write the blob into the pod: exit %d: %s", code, stderr)
	}
	if os.Getenv("LIMEN_STREAM_BURN") != "" {
		burnCPU(t)
	}
	runs := streamRuns(t)
	for _, cl := range execClients {
		t.Run(cl.transport, func(t *testing.T) {
			direct := cl.download(t, c.Kubeconfig, ns, "direct")
			if direct.n != blobSize || direct.sum != want || direct.code != blobExit {
				t.Fatalf("direct run: %d bytes, sha256 %s, exit %d; want %d, %s, %d", direct.n, direct.sum, direct.code, blobSize, want, blobExit)
			}
			for i := range runs {
				marker := fmt.Sprintf("bytes-%s-%d", cl.transport, i)
				got := cl.download(t, kc, ns, marker)
				if got.n != direct.n || got.sum != direct.sum || got.code != direct.code {
					t.Errorf("run %d out: %d bytes, sha256 %s, exit %d, stderr %q; the direct run had %d bytes, %s, exit %d",
						i, got.n, got.sum, got.code, got.stderr, direct.n, direct.sum, direct.code)
				}
				out, stderr, code := cl.runBytes(t, kc, blob, "-n", ns, "exec", "-i", "bytes", "--", "sh", "-c", "sha256sum", marker+"-in")
				if f := strings.Fields(string(out)); code != 0 || len(f) == 0 || f[0] != want {
					t.Errorf("run %d in: sha256sum in the pod printed %q (exit %d, stderr %q), want %s", i, out, code, stderr, want)
				}
				ev := waitSessionEnd(t, "alice", "bytes", sessionCommand(marker))
				s := ev.Session
				if s.EndReason != audit.EndCompleted || s.ExitCode == nil || *s.ExitCode != blobExit || s.BytesOut < blobSize {
					t.Errorf("run %d: session.end %+v: want end_reason completed, exit %d and at least %d bytes out", i, s, blobExit, blobSize)
				}
				// The recording of 64 MiB is stored too (and the shared
				// uploader is idle again for the tests that follow).
				waitRecordingStored(t, ev.SessionID, s.RecordingSHA256)
				in := waitSessionEnd(t, "alice", "bytes", sessionCommand(marker+"-in"))
				if in.Session.EndReason != audit.EndCompleted || in.Session.BytesIn < blobSize {
					t.Errorf("run %d in: session.end %+v: want end_reason completed and at least %d bytes in", i, in.Session, blobSize)
				}
			}
		})
	}
}

// blobRun is what one download delivered.
type blobRun struct {
	n      int64
	sum    string
	code   int
	stderr string
}

// download runs `cat blob; exit 7` in the pod, hashing what kubectl prints.
func (c streamClient) download(t *testing.T, kubeconfig, ns, marker string) blobRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := c.command(t, ctx, kubeconfig, "-n", ns, "exec", "bytes", "--", "sh", "-c", fmt.Sprintf("cat blob; exit %d", blobExit), marker)
	h := &countingHash{h: sha256.New()}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = h, &stderr
	code := exitCode(t, cmd.Run(), ctx)
	return blobRun{n: h.n, sum: hex.EncodeToString(h.h.Sum(nil)), code: code, stderr: strings.TrimSpace(stderr.String())}
}

// runBytes runs kubectl with stdin and returns stdout, stderr and the exit code.
func (c streamClient) runBytes(t *testing.T, kubeconfig string, stdin []byte, args ...string) ([]byte, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := c.command(t, ctx, kubeconfig, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	code := exitCode(t, cmd.Run(), ctx)
	return out.Bytes(), stderr.String(), code
}

func exitCode(t *testing.T, err error, ctx context.Context) int {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("kubectl did not finish: %v", ctx.Err())
	case errors.As(err, &ee):
		return ee.ExitCode()
	case err != nil:
		t.Fatalf("kubectl: %v", err)
	}
	return 0
}

type countingHash struct {
	h hash.Hash
	n int64
}

func (c *countingHash) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.h.Write(p)
}

// burnCPU starts a busy loop per core, as a neighbour competing with
// kubectl, Limen and the API server, until the test ends.
func burnCPU(t *testing.T) {
	t.Helper()
	for range runtime.NumCPU() {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start CPU burner: %v", err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
}

// waitRecordingStored waits until the proxy's recording store holds
// recording id with checksum sum.
func waitRecordingStored(t *testing.T, id, sum string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		st, err := recstore.OpenExisting(recstore.Path(proxyDataDir(t)))
		if err == nil {
			info, ferr := st.Find(id)
			if ferr == nil {
				if info.SHA256 != sum {
					t.Fatalf("recording %s stored with sha256 %s, session.end says %s", id, info.SHA256, sum)
				}
				return
			}
			err = ferr
		}
		if time.Now().After(deadline) {
			t.Fatalf("recording %s did not reach the proxy's store: %v", id, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
