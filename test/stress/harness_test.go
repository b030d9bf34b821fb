package stress

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// These check the harness itself, without a control plane: a checker that
// cannot fail proves nothing.

func TestGeneratorMatchesExpectedSum(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const size = 3<<20 + 17
	for _, seed := range []uint64{42, 42 | textSeed} {
		cmd := exec.Command(self, genArg, strconv.FormatUint(seed, 10), strconv.Itoa(size), strconv.Itoa(genExit))
		var out bytes.Buffer
		cmd.Stdout = &out
		err = cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != genExit {
			t.Fatalf("generator: %v, want exit code %d", err, genExit)
		}
		r := result{bytes: int64(out.Len()), sum: sha256.Sum256(out.Bytes()), exit: genExit}
		k := kase{exit: genExit}
		if msg := verdict(k, r, expectedSum(seed, size), size); msg != "" {
			t.Fatalf("generator output for seed %#x: %s", seed, msg)
		}
		if msg := verdict(k, r, expectedSum(seed+1, size), size); msg == "" {
			t.Fatal("another seed's data passed as this seed's")
		}
		printable := !bytes.ContainsFunc(out.Bytes(), func(r rune) bool { return !strings.ContainsRune(textAlphabet, r) })
		if printable != (seed&textSeed != 0) {
			t.Errorf("seed %#x: output printable = %v", seed, printable)
		}
	}
}

func TestVerdictCatchesShortWrongAndExit(t *testing.T) {
	const size = 1000
	want := expectedSum(1, size)
	k := kase{exit: genExit}
	for _, tc := range []struct {
		name string
		r    result
		says string
	}{
		{"short", result{bytes: size - 1, sum: expectedSum(1, size-1), exit: genExit}, "999 of 1000 bytes (-1)"},
		{"long", result{bytes: size + 1, exit: genExit}, "1001 of 1000 bytes (+1)"},
		{"corrupt", result{bytes: size, sum: expectedSum(2, size), exit: genExit}, "sha256"},
		{"exit 0", result{bytes: size, sum: want, exit: 0}, "exit code 0, want 3"},
		{"timeout", result{bytes: size, sum: want, exit: genExit, err: "kubectl did not finish"}, "did not finish"},
	} {
		if msg := verdict(k, tc.r, want, size); !strings.Contains(msg, tc.says) {
			t.Errorf("%s: verdict %q, want it to say %q", tc.name, msg, tc.says)
		}
	}
	if msg := verdict(k, result{bytes: size, sum: want, exit: genExit}, want, size); msg != "" {
		t.Errorf("an intact run: verdict %q", msg)
	}
	ws := kase{exit: genExit, marker: wsExec, transport: "websocket"}
	stderr := "I1130 18:33:25.287134   22896 podcmd.go:88] Defaulting container name to p\n" +
		"I1130 18:33:25.317191   22896 websocket.go:133] The subprotocol is v5.channel.k8s.io\n"
	r := result{bytes: size, sum: want, exit: genExit}
	if r.stderr, r.spoke = readStderr(stderr, wsExec); r.stderr != "" || verdict(ws, r, want, size) != "" {
		t.Errorf("a WebSocket run: complaints %q, verdict %q", r.stderr, verdict(ws, r, want, size))
	}
	r.stderr, r.spoke = readStderr("I1130 18:33:25.287134   22896 podcmd.go:88] Defaulting container name to p\nerror: boom\n", wsExec)
	if msg := verdict(ws, r, want, size); r.stderr != "error: boom" || !strings.Contains(msg, "did not speak websocket") {
		t.Errorf("a run that fell back to SPDY: complaints %q, verdict %q", r.stderr, msg)
	}
}

// TestSinkDetectsLoss runs the port-forward protocol directly and through a
// relay that drops the last bytes of each direction (the defect this suite
// hunts): direct passes, the lossy relay fails both ways.
func TestSinkDetectsLoss(t *testing.T) {
	const size = 2 << 20
	s := startSink(t, 30*time.Second)
	direct := s.l.Addr().String()
	lossy := lossyRelay(t, direct, 1000)
	k := kase{}
	for _, op := range []byte{opUpload, opDownload} {
		seed := uint64(op)
		if msg := verdict(k, s.transfer(direct, op, seed, size), expectedSum(seed, size), size); msg != "" {
			t.Errorf("%c direct: %s", op, msg)
		}
		seed++
		r := s.transfer(lossy, op, seed, size)
		if msg := verdict(k, r, expectedSum(seed, size), size); !strings.Contains(msg, "of 2097152 bytes") {
			t.Errorf("%c through a relay that drops 1000 bytes: verdict %q, want it short", op, msg)
		}
	}
}

// lossyRelay forwards TCP connections to target but drops the last drop
// bytes of each direction before passing the half-close on, as a relay that
// closes too early would.
func lossyRelay(t *testing.T, target string, drop int) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	pass := func(dst, src *net.TCPConn) {
		b, _ := io.ReadAll(src) // small test streams only
		if len(b) > drop+headerLen {
			b = b[:len(b)-drop]
		}
		_, _ = dst.Write(b)
		_ = dst.CloseWrite()
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go func() {
				defer c.Close()
				defer u.Close()
				done := make(chan struct{})
				go func() { pass(u.(*net.TCPConn), c.(*net.TCPConn)); close(done) }()
				pass(c.(*net.TCPConn), u.(*net.TCPConn))
				<-done
			}()
		}
	}()
	return l.Addr().String()
}
