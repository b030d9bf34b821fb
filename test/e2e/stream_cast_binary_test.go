package e2e

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/limenhq/limen/test/cluster/clustertest"
)

// binaryOutput prints text (accents, a check mark, colours, tabs, a quote
// and a backslash), 64 KiB of random bytes, then text again.
const binaryOutput = `printf 'caf\303\251 \342\234\223 \033[1mbold\033[0m\t"q" \\\\ \010\014\n'; ` +
	`head -c 65536 /dev/urandom; printf '\nthe end\n'`

// TestRecordingOfBinaryOutputPlays records a command that prints text and
// random binary bytes, and checks the recording against what kubectl
// printed: our reader gives the text byte for byte (each line feed as a
// terminal showed it, since the exec has no tty) and each byte that is not
// UTF-8 as U+FFFD, asciinema-player reads the same, and the recording is
// compact (raw U+FFFD, not its six-byte escape).
func TestRecordingOfBinaryOutputPlays(t *testing.T) {
	kc := userKubeconfig(t, "alice")
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "binary", []string{"sleep", "infinity"}, false)
	for _, cl := range execClients {
		t.Run(cl.transport, func(t *testing.T) {
			marker := "binary-" + cl.transport
			out, stderr, code := cl.runBytes(t, kc, nil, "-n", ns, "exec", "binary", "--", "sh", "-c", binaryOutput, marker)
			if code != 0 || len(out) < 65536 {
				t.Fatalf("exec: exit %d, %d bytes, stderr %q", code, len(out), stderr)
			}
			ev := waitSessionEnd(t, "alice", "binary", sessionCommand(marker))
			rec := fetchRecording(t, ev.SessionID)
			_, evs := castEvents(t, rec)
			if got, want := castOutput(evs), shownByTerminal(replaceInvalid(out)); got != want {
				t.Fatalf("recorded output (%d bytes) is not what kubectl printed (%d bytes) with U+FFFD for each byte that is not UTF-8 and \\r\\n for each bare line feed",
					len(got), len(want))
			}
			if text := "caf\u00e9 \u2713 \x1b[1mbold\x1b[0m\t\"q\" \\\\ \b\f\r\n"; !strings.HasPrefix(castOutput(evs), text) {
				t.Errorf("the text before the binary bytes is not recorded as it was printed")
			}
			if strings.Contains(string(rec), `\ufffd`) {
				t.Errorf("the recording escapes U+FFFD in six bytes instead of storing its three")
			}
			// 10.5% of random bytes are control characters (up to 6 bytes
			// each in JSON), half are not UTF-8 (3 bytes): about 2.4 times.
			ratio := float64(len(rec)) / float64(len(out))
			t.Logf("recording of %d bytes for %d bytes of output: %.2f times", len(rec), len(out), ratio)
			if ratio > 2.6 {
				t.Errorf("the recording is %.2f times the output; binary output should take about 2.4", ratio)
			}
			v := validateCast(t, rec)
			if !strings.HasSuffix(v.Output, "\r\nthe end\r\n") {
				t.Errorf("asciinema-player's output ends %q", v.Output[max(0, len(v.Output)-20):])
			}
		})
	}
}

// replaceInvalid is p with each byte that is not valid UTF-8 replaced by
// U+FFFD, as a terminal shows it.
func replaceInvalid(p []byte) string {
	var b strings.Builder
	for len(p) > 0 {
		r, n := utf8.DecodeRune(p)
		b.WriteRune(r)
		p = p[n:]
	}
	return b.String()
}
