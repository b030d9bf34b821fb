package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/test/cluster/clustertest"
)

// TestRecordingCapEndsTheSession restarts the shared worker with
// --recording-max-bytes 1Mi and runs, over each exec transport, a command
// that writes 16 MiB. kubectl must exit non-zero with a message naming the
// cap, having received no more output than the recording holds;
// session.end must say the recording cap ended the session; and the
// recording the proxy stores must be valid asciicast within the cap,
// ending with the marker that says where it was cut, and asciinema-player
// must read it.
func TestRecordingCapEndsTheSession(t *testing.T) {
	e := gateway(t)
	const capBytes, flood = 1 << 20, 16 << 20
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.RestartWorker(ctx, "--recording-max-bytes", "1Mi"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.RestartWorker(ctx); err != nil {
			t.Errorf("restart the worker without the cap: %v", err)
		}
	})
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "flood", []string{"sleep", "infinity"}, false)
	kc := userKubeconfig(t, "alice")
	capText := recording.FormatBytes(capBytes) // "1 MiB"

	for _, cl := range execClients {
		t.Run(cl.transport, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := cl.command(t, ctx, kc, "-n", ns, "exec", "flood", "--", "sh", "-c",
				fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a", flood))
			var out countWriter
			var stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if ctx.Err() != nil || !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Fatalf("kubectl exec: %v (ctx %v), want a non-zero exit; stderr: %s", err, ctx.Err(), stderr.String())
			}
			msg := stderr.String()
			t.Logf("kubectl exited %d after %d bytes of output; stderr: %s", ee.ExitCode(), out.n.Load(), strings.TrimSpace(msg))
			if !strings.Contains(msg, "recording") || !strings.Contains(msg, capText) {
				t.Errorf("kubectl's message %q does not say the recording reached its cap of %s", msg, capText)
			}
			if got := out.n.Load(); got > capBytes {
				t.Errorf("kubectl received %d bytes of output, more than the %d-byte recording can hold", got, capBytes)
			}

			id := sessionOnPod(t, ns, "flood")
			end := waitSessionEnd(t, "alice", "flood", func(ev audit.Event) bool { return ev.SessionID == id })
			if end.Session.EndReason != audit.EndRecordingCap {
				t.Errorf("session.end end_reason %q, want %q", end.Session.EndReason, audit.EndRecordingCap)
			}

			rec := fetchRecording(t, id)
			if len(rec) > capBytes {
				t.Errorf("stored recording is %d bytes, above the cap of %d", len(rec), capBytes)
			}
			if sum := sha256.Sum256(rec); end.Session.RecordingSHA256 != hex.EncodeToString(sum[:]) {
				t.Errorf("session.end recording_sha256 %q is not the stored recording's", end.Session.RecordingSHA256)
			}
			_, evs := castEvents(t, rec)
			if last := evs[len(evs)-1]; last.Code != "m" || !strings.Contains(last.Data, capText) {
				t.Errorf("recording ends with %+v, want the marker naming the cap", last)
			}
			if got, recorded := out.n.Load(), int64(len(castOutput(evs))); got > recorded {
				t.Errorf("kubectl received %d bytes, the recording holds %d: output was relayed unrecorded", got, recorded)
			}
			validateCast(t, rec) // the player reads the cut recording as our reader does

		})
	}
}
