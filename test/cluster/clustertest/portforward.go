package clustertest

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// PortForward starts cmd, a `kubectl port-forward` of one remote port, and
// waits until kubectl prints the local address it listens on. stop ends
// kubectl (interrupt, then kill after 5 s) and returns what it printed on
// stderr, where kubectl reports the connections it failed to forward; the
// test's cleanup calls stop too.
func PortForward(t testing.TB, cmd *exec.Cmd) (addr string, stop func() (stderr string)) {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer // written by exec's copier until Wait returns
	cmd.Stderr = &errb
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", strings.Join(cmd.Args, " "), err)
	}
	var once sync.Once
	stop = func() string {
		once.Do(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			kill := time.AfterFunc(5*time.Second, func() { _ = cmd.Process.Kill() })
			_ = cmd.Wait()
			kill.Stop()
		})
		return errb.String()
	}
	t.Cleanup(func() { stop() })
	line := NewScreen(stdout).WaitForLine(t, "Forwarding from 127.0.0.1:")
	return strings.Fields(strings.TrimPrefix(line, "Forwarding from "))[0], stop
}
