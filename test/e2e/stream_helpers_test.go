package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/test/cluster/clustertest"
)

// streamClient is one kubectl and the transport it uses for a stream.
type streamClient struct {
	transport string
	minor     string // "" for the newest
	env       []string
}

// execClients are the kubectl transports for exec and attach: WebSocket
// (the newest kubectl) and SPDY (1.29).
var execClients = []streamClient{
	{transport: "websocket"},
	{transport: "spdy", minor: "1.29"},
}

// portForwardClients are the transports for port-forward: SPDY (1.29) and
// SPDY inside WebSocket (the newest kubectl, ≥ 1.31).
var portForwardClients = []streamClient{
	{transport: "spdy", minor: "1.29"},
	{transport: "spdy-in-websocket"},
}

func (c streamClient) bin(t *testing.T) string { return clustertest.Kubectl(t, c.minor) }

// command builds a kubectl command for kubeconfig.
func (c streamClient) command(t *testing.T, ctx context.Context, kubeconfig string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.bin(t), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), c.env...)
	return cmd
}

// run runs kubectl to completion and returns stdout, stderr and the exit code.
func (c streamClient) run(t *testing.T, kubeconfig, stdin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := c.command(t, ctx, kubeconfig, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), errb.String(), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("kubectl %v: %v", args, err)
	}
	return out.String(), errb.String(), 0
}

// proxyDataDir is the data directory of the shared proxy.
func proxyDataDir(t *testing.T) string { return filepath.Join(gateway(t).Dir, "proxy") }

// waitSessionEnd polls the proxy's audit store for the session.end event of
// user's session on pod that match accepts.
func waitSessionEnd(t *testing.T, user, pod string, match func(audit.Event) bool) audit.Event {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := audit.Open(ctx, audit.Path(proxyDataDir(t)), audit.Options{ReadOnly: true})
		if err != nil {
			t.Fatalf("open audit store: %v", err)
		}
		evs, err := st.Search(ctx, audit.Query{User: user, Type: audit.TypeSessionEnd, Limit: 200})
		st.Close()
		if err != nil {
			t.Fatalf("search audit: %v", err)
		}
		for i := len(evs) - 1; i >= 0; i-- {
			if ev := evs[i]; ev.Session != nil && ev.Session.Pod == pod && match(ev) {
				return ev
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no matching session.end for %s on pod %s among %d events", user, pod, len(evs))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// fetchRecording waits until the proxy's store holds the recording of
// session id (uploads are asynchronous) and returns it, verified.
func fetchRecording(t *testing.T, id string) []byte {
	t.Helper()
	return fetchRecordingIn(t, proxyDataDir(t), id)
}

// fetchRecordingIn is fetchRecording from the store of the proxy whose
// data directory is dir.
func fetchRecordingIn(t *testing.T, dir, id string) []byte {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := recstore.OpenExisting(recstore.Path(dir))
		if err == nil {
			r, _, err := st.Open(id)
			if err == nil {
				b, err := io.ReadAll(r)
				r.Close()
				if err != nil {
					t.Fatalf("read recording %s: %v", id, err)
				}
				return b
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("recording %s did not reach the proxy's store: %v", id, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// castEvents parses a recording with our reader and returns its header and
// events.
func castEvents(t *testing.T, b []byte) (recording.Header, []recording.Event) {
	t.Helper()
	rd, err := recording.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("recording header: %v\n%s", err, b)
	}
	var evs []recording.Event
	for {
		ev, err := rd.Next()
		if err == io.EOF {
			return rd.Header, evs
		}
		if err != nil {
			t.Fatalf("recording event: %v", err)
		}
		evs = append(evs, ev)
	}
}

// shownByTerminal is output as a terminal shows it: each line feed not
// after a carriage return as "\r\n" (onlcr). It is what a recording holds
// of the output of a session without a tty, whose bare line feeds kubectl
// prints as they are.
func shownByTerminal(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' && (i == 0 || s[i-1] != '\r') {
			b.WriteByte('\r')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// castOutput joins the output events of a recording.
func castOutput(evs []recording.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Code == "o" {
			b.WriteString(ev.Data)
		}
	}
	return b.String()
}

// castHas reports whether an event with code and data is in evs.
func castHas(evs []recording.Event, code, data string) bool {
	for _, ev := range evs {
		if ev.Code == code && ev.Data == data {
			return true
		}
	}
	return false
}

func itoa(n int) string { return strconv.Itoa(n) }
