package e2e

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/sessions"
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
			// One session.start and one session.end, with the same groups.
			auditStory(t, ev.SessionID).check(t, sessions.KindExec, nil)
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
			if v := validateCast(t, rec); v.Exit == nil || *v.Exit != "7" || strings.Contains(v.Output, secret) {
				t.Fatalf("asciinema-player sees exit %v and output %q", deref(v.Exit), v.Output)
			}
			zero := waitSessionEnd(t, "alice", "shell", sessionCommand(marker+"-zero"))
			if zero.Session.ExitCode == nil || *zero.Session.ExitCode != 0 {
				t.Fatalf("session.end of exit 0: %+v", zero.Session)
			}
		})
	}
}

func TestStreamExecTTYWithResize(t *testing.T) {
	kc := userKubeconfig(t, "alice")
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "tty", []string{"sleep", "infinity"}, false)
	for _, c := range execClients {
		t.Run(c.transport, func(t *testing.T) {
			marker := "tty-" + c.transport
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := c.command(t, ctx, kc, "-n", ns, "exec", "-it", "tty", "--", "sh", "-c", "exec sh", marker)
			ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 100, Rows: 30})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); ptmx.Close() }()
			screen := clustertest.NewScreen(ptmx)
			send := func(s string) { _, _ = io.WriteString(ptmx, s) }
			// kubectl sends the initial size and every resize on a stream of
			// their own, so the shell may see them after it starts: ask until
			// the size shows, as a person at the terminal would.
			screen.Retype(t, send, "stty size", "30 100")
			if err := pty.Setsize(ptmx, &pty.Winsize{Cols: 132, Rows: 43}); err != nil {
				t.Fatal(err)
			}
			screen.Retype(t, send, "stty size", "43 132")
			send("echo typed-$((6*7))\n")
			screen.WaitFor(t, "typed-42")
			send("exit 3\n")
			var ee *exec.ExitError
			if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 3 {
				t.Fatalf("exec -it exit: %v, want exit code 3", err)
			}

			ev := waitSessionEnd(t, "alice", "tty", sessionCommand(marker))
			if ev.Session.ExitCode == nil || *ev.Session.ExitCode != 3 {
				t.Fatalf("session.end %+v, want exit code 3", ev.Session)
			}
			rec := fetchRecording(t, ev.SessionID)
			hdr, evs := castEvents(t, rec)
			// The initial size is the header's when it arrived before any
			// output, else an "r" event.
			if (hdr.Term.Cols != 100 || hdr.Term.Rows != 30) && !castHas(evs, "r", "100x30") {
				t.Errorf("recording has neither a 100x30 header (%+v) nor a 100x30 resize", hdr.Term)
			}
			if !castHas(evs, "r", "132x43") || !castHas(evs, "x", "3") {
				t.Fatalf("recording lacks the resize 132x43 or the exit status 3:\n%s", rec)
			}
			// Under a tty the shell echoes what is typed, so "typed-" is in
			// the output; the keystrokes themselves (stdin) never are.
			if out := castOutput(evs); !strings.Contains(out, "typed-42") || !strings.Contains(out, "43 132") {
				t.Fatalf("recording output lacks the session's output: %q", out)
			}
			if v := validateCast(t, rec); len(v.Resizes) == 0 || v.Resizes[len(v.Resizes)-1] != "132x43" || deref(v.Exit) != "3" {
				t.Fatalf("asciinema-player sees resizes %v and exit %s", v.Resizes, deref(v.Exit))
			}
		})
	}
}

func TestStreamAttach(t *testing.T) {
	kc := userKubeconfig(t, "alice")
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "talker", []string{"sh", "-c", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.1; done"}, false)
	for _, c := range execClients {
		t.Run(c.transport, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := c.command(t, ctx, kc, "-n", ns, "attach", "talker")
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			started := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			screen := clustertest.NewScreen(stdout)
			screen.WaitFor(t, "tick ")
			time.Sleep(500 * time.Millisecond)
			screen.Has("")
			seen := screen.String()
			_ = cmd.Process.Signal(os.Interrupt)
			_ = cmd.Wait()

			ev := waitSessionEnd(t, "alice", "talker", func(ev audit.Event) bool {
				return ev.Session.Login == "attach" && ev.Time.After(started)
			})
			if ev.Session.BytesOut == 0 || ev.Session.RecordingSHA256 == "" {
				t.Fatalf("session.end %+v: want output bytes and a recording", ev.Session)
			}
			_, evs := castEvents(t, fetchRecording(t, ev.SessionID))
			out := castOutput(evs)
			for _, line := range strings.Split(strings.TrimSpace(seen), "\n") {
				if !strings.Contains(out, strings.TrimSpace(line)) {
					t.Fatalf("the user saw %q, which the recording lacks:\n%s", line, out)
				}
			}
		})
	}
}
