package e2e

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/test/cluster/clustertest"
)

// noTTYLines is how many lines the recorded command prints.
const noTTYLines = 12

var tickLine = regexp.MustCompile(`^console-tick-(\d+)$`)

// TestConsolePlaysANonTTYExecAsATerminalShowedIt records a kubectl exec
// without -t, whose output has bare line feeds, and plays it in the
// console's asciinema-player in chromium: every line the player's terminal
// renders starts at column 0, none is left where the line above ended (a
// staircase). kubectl itself still prints the bare line feeds, and the
// session's bytes out are those relayed. The screenshot of the page at 1280
// px (recording-notty-1280.png in consoleShots) is docs/console-recording.png.
func TestConsolePlaysANonTTYExecAsATerminalShowedIt(t *testing.T) {
	e := gateway(t)
	base := "https://" + e.ProxyAddr
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "console-pod", []string{"sleep", "3600"}, false)
	kc := userKubeconfig(t, "alice")
	script := fmt.Sprintf("i=0; while [ $i -lt %d ]; do i=$((i+1)); echo console-tick-$i; sleep 0.2; done", noTTYLines)
	out, stderr, code := kubectl(t, kc, "", "-n", ns, "exec", "console-pod", "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("kubectl exec: exit %d, stderr %q", code, stderr)
	}
	var want strings.Builder
	for i := 1; i <= noTTYLines; i++ {
		fmt.Fprintf(&want, "console-tick-%d\n", i)
	}
	if out != want.String() {
		t.Fatalf("kubectl printed %q, want the command's own bytes %q", out, want.String())
	}
	ev := waitSessionEnd(t, "alice", "console-pod", func(ev audit.Event) bool {
		return ev.Session.Namespace == ns && slices.Contains(ev.Session.Command, script)
	})
	id := ev.SessionID
	rec := fetchRecording(t, id)
	hdr, evs := castEvents(t, rec)
	if hdr.Env[recording.EnvTTY] != "false" {
		t.Errorf("the recording's header env %v does not say the session had no terminal", hdr.Env)
	}
	if got := castOutput(evs); got != shownByTerminal(want.String()) {
		t.Errorf("recorded %q, want each line ended by \\r\\n: %q", got, shownByTerminal(want.String()))
	}
	// The bytes out are counted as relayed (framing included), never as
	// recorded: at least the output, and not the recording's larger text.
	if n := int64(len(want.String())); ev.Session.BytesOut < n {
		t.Errorf("session.end counts %d bytes out, fewer than the %d of output", ev.Session.BytesOut, n)
	}

	admin := consoleBrowser(t)
	signIn(t, admin, base, "admin", password("admin"))
	run(t, admin, "open the recording", chromedp.Navigate(base+"/console/recordings/"+id), chromedp.WaitVisible("#player", css("#player")))
	// What the player's terminal rendered, row by row, once it shows the
	// last line.
	var rows []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		rows = eval[[]string](t, admin, `[...document.querySelectorAll('#player .ap-term .ap-line')].map(l => l.textContent)`)
		// Joined without blanks, so that a line the terminal wrapped is read whole.
		if consoleTick(strings.NewReplacer(" ", "", "\u00a0", "").Replace(strings.Join(rows, ""))) == noTTYLines {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the player did not render the last line within 30s; rows %q\n(page: %q)", rows, text(t, admin, "main"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	next := 1
	for i, row := range rows {
		row = strings.TrimRight(strings.ReplaceAll(row, "\u00a0", " "), " ")
		if row == "" {
			continue
		}
		m := tickLine.FindStringSubmatch(row)
		if m == nil {
			t.Errorf("row %d of the player's terminal is %q: a line that does not start at column 0, or is not one of the command's", i, row)
			continue
		}
		if m[1] != fmt.Sprint(next) {
			t.Errorf("row %d shows %q, want console-tick-%d", i, row, next)
		}
		next++
	}
	if next != noTTYLines+1 {
		t.Errorf("the player's terminal shows %d of the %d lines: %q", next-1, noTTYLines, rows)
	}
	screenshot(t, admin, "recording-notty")
}
