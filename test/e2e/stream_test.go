package e2e

import (
	"slices"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/test/cluster/clustertest"
)

// sessionCommand matches a session event whose command holds marker.
func sessionCommand(marker string) func(audit.Event) bool {
	return func(ev audit.Event) bool { return slices.Contains(ev.Session.Command, marker) }
}

func TestStreamExecStdinAndExitCodes(t *testing.T) {
	kc := userKubeconfig(t, "alice")
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "shell", []string{"sleep", "infinity"}, false)
	for _, c := range execClients {
		t.Run(c.transport, func(t *testing.T) {
			secret := "stdin-secret-" + c.transport + "-never-recorded"
			marker := "marker-" + c.transport
			script := `read line; echo "got ${#line} bytes"; echo to-stderr >&2; exit 7`
			out, stderr, code := c.run(t, kc, secret+"\n", "-n", ns, "exec", "-i", "shell", "--", "sh", "-c", script, marker)
			if want := "got " + itoa(len(secret)) + " bytes\n"; code != 7 || out != want || !strings.Contains(stderr, "to-stderr") {
				t.Fatalf("exec: code %d (want 7), stdout %q (want %q), stderr %q", code, out, want, stderr)
			}
			out, stderr, code = c.run(t, kc, "", "-n", ns, "exec", "shell", "--", "sh", "-c", "echo ok", marker+"-zero")
			if code != 0 || out != "ok\n" {
				t.Fatalf("exec exit 0: code %d, stdout %q, stderr %q", code, out, stderr)
			}

			ev := waitSessionEnd(t, "alice", "shell", sessionCommand(marker))
			s := ev.Session
			if s.Kind != "kube" || s.Login != "exec" || s.Namespace != ns || s.ExitCode == nil || *s.ExitCode != 7 {
				t.Fatalf("session.end %+v: want kube exec in %s with exit code 7", s, ns)
			}
			if s.BytesIn == 0 || s.BytesOut == 0 || s.Duration <= 0 || s.RecordingSHA256 == "" {
				t.Fatalf("session.end %+v: want bytes each way, a duration and a recording checksum", s)
			}
			if !sessionStarted(t, ev.SessionID) {
				t.Fatalf("no session.start for session %s", ev.SessionID)
			}
			rec := fetchRecording(t, ev.SessionID)
			if strings.Contains(string(rec), secret) {
				t.Fatalf("the recording holds stdin:\n%s", rec)
			}
			hdr, evs := castEvents(t, rec)
			if hdr.Version != 3 || !strings.Contains(hdr.Command, marker) {
				t.Fatalf("recording header %+v", hdr)
			}
			output := castOutput(evs)
			if !strings.Contains(output, "got "+itoa(len(secret))+" bytes") || !strings.Contains(output, "to-stderr") {
				t.Fatalf("recording output %q lacks stdout or stderr", output)
			}
			if !castHas(evs, "x", "7") {
				t.Fatalf("recording lacks the exit status 7: %+v", evs)
			}
			zero := waitSessionEnd(t, "alice", "shell", sessionCommand(marker+"-zero"))
			if zero.Session.ExitCode == nil || *zero.Session.ExitCode != 0 {
				t.Fatalf("session.end of exit 0: %+v", zero.Session)
			}
		})
	}
}
