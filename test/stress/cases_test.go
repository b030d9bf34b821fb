package stress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limenhq/limen/test/cluster/clustertest"
)

// The exit codes the pod's commands end with. Not 0: a stream that loses
// its exit status makes kubectl exit 0, which these tell apart.
const (
	genExit = 3 // of the data generator (exec output)
	catExit = 5 // of `cat && exit 5` (exec stdin)
)

// kase is one row of the report: an operation in one direction over one
// transport, spoken by one kubectl version.
type kase struct {
	op        string // exec, exec cat, cp, port-forward
	direction string // download (pod → client), upload, round trip
	transport string
	minor     string // the kubectl minor version that speaks transport
	exit      int    // what every run must exit with
	// marker is the line kubectl -v=4 logs when it speaks transport; "" for
	// SPDY, the only transport those kubectl versions have. It shows that
	// kubectl did not fall back to SPDY when its WebSocket upgrade failed.
	marker   string
	recorded bool // Limen records its output: prune the store after a batch
	run      func(h *harness, b batch) []result
}

func (k kase) name() string {
	return strings.ReplaceAll(k.op+" "+k.direction+" "+k.transport, " ", "-")
}

// What kubectl -v=4 logs once it speaks WebSocket.
const (
	wsExec        = "The subprotocol is v5.channel.k8s.io"
	wsPortForward = "negotiated protocol: portforward.k8s.io"
)

// cases: exec and cp over WebSocket v5 (kubectl 1.33) and SPDY (1.29);
// port-forward over SPDY (1.30) and SPDY inside WebSocket (1.33).
var cases = []kase{
	{op: "exec", direction: "download", transport: "websocket", minor: "1.33", marker: wsExec, exit: genExit, recorded: true, run: (*harness).execOutput},
	{op: "exec", direction: "download", transport: "spdy", minor: "1.29", exit: genExit, recorded: true, run: (*harness).execOutput},
	{op: "exec cat", direction: "round trip", transport: "websocket", minor: "1.33", marker: wsExec, exit: catExit, recorded: true, run: (*harness).execCat},
	{op: "exec cat", direction: "round trip", transport: "spdy", minor: "1.29", exit: catExit, recorded: true, run: (*harness).execCat},
	{op: "cp", direction: "upload", transport: "websocket", minor: "1.33", marker: wsExec, run: (*harness).cpUpload},
	{op: "cp", direction: "upload", transport: "spdy", minor: "1.29", run: (*harness).cpUpload},
	{op: "cp", direction: "download", transport: "websocket", minor: "1.33", marker: wsExec, recorded: true, run: (*harness).cpDownload},
	{op: "cp", direction: "download", transport: "spdy", minor: "1.29", recorded: true, run: (*harness).cpDownload},
	{op: "port-forward", direction: "upload", transport: "spdy", minor: "1.30", run: portForward(opUpload)},
	{op: "port-forward", direction: "upload", transport: "spdy-in-websocket", minor: "1.33", marker: wsPortForward, run: portForward(opUpload)},
	{op: "port-forward", direction: "download", transport: "spdy", minor: "1.30", run: portForward(opDownload)},
	{op: "port-forward", direction: "download", transport: "spdy-in-websocket", minor: "1.33", marker: wsPortForward, run: portForward(opDownload)},
}

// batch is a few runs at once, each with its own seed, through one path.
type batch struct {
	t          *testing.T
	kubectl    string
	marker     string // the case's kase.marker
	kubeconfig string
	seeds      []uint64
}

// result is what one run delivered.
type result struct {
	bytes  int64
	sum    [32]byte
	exit   int
	dur    time.Duration
	err    string // what went wrong besides the data: a timeout, a lost answer
	stderr string // kubectl's, without its -v=4 info lines
	spoke  bool   // kubectl logged the case's marker
}

// verdict compares a run with what was sent; "" means it arrived intact.
func verdict(k kase, r result, want [32]byte, size int64) string {
	var bad []string
	if r.err != "" {
		bad = append(bad, r.err)
	}
	switch {
	case r.bytes != size:
		bad = append(bad, fmt.Sprintf("%d of %d bytes (%+d)", r.bytes, size, r.bytes-size))
	case r.sum != want:
		bad = append(bad, fmt.Sprintf("all %d bytes but sha256 %x…, want %x…", size, r.sum[:8], want[:8]))
	}
	if r.exit != k.exit {
		bad = append(bad, fmt.Sprintf("exit code %d, want %d", r.exit, k.exit))
	}
	if k.marker != "" && !r.spoke {
		bad = append(bad, fmt.Sprintf("kubectl %s never logged %q: it did not speak %s (fell back to SPDY?)", k.minor, k.marker, k.transport))
	}
	if len(bad) > 0 && r.stderr != "" {
		bad = append(bad, fmt.Sprintf("kubectl stderr: %q", r.stderr))
	}
	return strings.Join(bad, "; ")
}

// execOutput: the pod writes the run's data to stdout (the generator).
func (h *harness) execOutput(b batch) []result {
	return parallel(b.seeds, func(seed uint64) result {
		t := newTally()
		r := h.kubectl(b, []string{"-n", h.ns, "exec", h.pod, "--",
			h.self, genArg, strconv.FormatUint(seed, 10), strconv.FormatInt(h.cfg.size, 10), strconv.Itoa(genExit)}, nil, t)
		r.bytes, r.sum = t.n, t.sum()
		return r
	})
}

// execCat: the run's data goes into cat's stdin and comes back on stdout.
func (h *harness) execCat(b batch) []result {
	return parallel(b.seeds, func(seed uint64) result {
		t := newTally()
		r := h.kubectl(b, []string{"-n", h.ns, "exec", "-i", h.pod, "--", "sh", "-c", "cat && exit " + strconv.Itoa(catExit)},
			newStream(seed, h.cfg.size), t)
		r.bytes, r.sum = t.n, t.sum()
		return r
	})
}

// cpUpload copies a local file into the pod. The pod's processes share
// this host's file system, so the copy is checked where it landed.
func (h *harness) cpUpload(b batch) []result {
	return parallel(b.seeds, func(seed uint64) result {
		dir, src, err := h.runDir(seed)
		if err != nil {
			return result{err: err.Error(), exit: -1}
		}
		defer os.RemoveAll(dir)
		dst := filepath.Join(dir, "dst")
		if err := os.Mkdir(dst, 0o755); err != nil {
			return result{err: err.Error(), exit: -1}
		}
		r := h.kubectl(b, []string{"-n", h.ns, "cp", src, h.pod + ":" + filepath.Join(dst, "data")}, nil, nil)
		var terr error
		if r.bytes, r.sum, terr = tallyFile(filepath.Join(dst, "data")); terr != nil {
			r.err = join(r.err, terr.Error())
		}
		return r
	})
}

// cpDownload copies a file of the pod to a local file.
func (h *harness) cpDownload(b batch) []result {
	return parallel(b.seeds, func(seed uint64) result {
		dir, src, err := h.runDir(seed)
		if err != nil {
			return result{err: err.Error(), exit: -1}
		}
		defer os.RemoveAll(dir)
		dst := filepath.Join(dir, "copied")
		r := h.kubectl(b, []string{"-n", h.ns, "cp", h.pod + ":" + src, dst}, nil, nil)
		var terr error
		if r.bytes, r.sum, terr = tallyFile(dst); terr != nil {
			r.err = join(r.err, terr.Error())
		}
		return r
	})
}

// runDir makes a directory for one cp run holding the run's data in "src".
func (h *harness) runDir(seed uint64) (dir, src string, err error) {
	dir = filepath.Join(h.work, strconv.FormatUint(seed, 16))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", "", err
	}
	src = filepath.Join(dir, "src")
	return dir, src, writeStreamFile(src, seed, h.cfg.size)
}

// portForward runs a batch as concurrent connections through one kubectl
// port-forward. Whatever kubectl reports on stderr (a connection it failed
// to forward) fails every run of the batch: it cannot be pinned on one.
func portForward(op byte) func(h *harness, b batch) []result {
	return func(h *harness, b batch) []result {
		cmd := exec.Command(b.kubectl, "--kubeconfig", b.kubeconfig, "-v=4", "-n", h.ns, "port-forward", "pod/"+h.pod, fmt.Sprintf(":%d", h.sink.port()))
		addr, stop := clustertest.PortForward(b.t, cmd)
		rs := parallel(b.seeds, func(seed uint64) result { return h.sink.transfer(addr, op, seed, h.cfg.size) })
		complaints, spoke := readStderr(stop(), b.marker)
		for i := range rs {
			rs[i].spoke = spoke
			if complaints != "" {
				rs[i].err = join(rs[i].err, fmt.Sprintf("kubectl port-forward reported %q", firstLines(complaints, 3)))
			}
		}
		return rs
	}
}

// kubectl runs one kubectl to completion within the run timeout.
func (h *harness) kubectl(b batch, args []string, stdin io.Reader, stdout io.Writer) result {
	timeout := h.cfg.runTimeout()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.kubectl, append([]string{"--kubeconfig", b.kubeconfig, "-v=4"}, args...)...)
	cmd.Stdin, cmd.Stdout = stdin, stdout
	errb := &capped{max: 64 << 10}
	cmd.Stderr = errb
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	r := result{dur: time.Since(start)}
	r.stderr, r.spoke = readStderr(errb.String(), b.marker)
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		r.exit, r.err = -1, fmt.Sprintf("kubectl did not finish within %s", timeout)
	case errors.As(err, &ee):
		r.exit = ee.ExitCode()
	case err != nil:
		r.exit, r.err = -1, fmt.Sprintf("kubectl: %v", err)
	}
	return r
}

// parallel runs f once per seed, all at once, and returns the results in
// seed order.
func parallel(seeds []uint64, f func(seed uint64) result) []result {
	rs := make([]result, len(seeds))
	var wg sync.WaitGroup
	for i, s := range seeds {
		wg.Go(func() { rs[i] = f(s) })
	}
	wg.Wait()
	return rs
}

// capped keeps the first max bytes written to it.
type capped struct {
	bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// klogInfo matches the info lines of kubectl -v=4 (I1130 18:33:25.083131 …).
var klogInfo = regexp.MustCompile(`^I\d{4} \d\d:\d\d:\d\d\.\d+ `)

// readStderr splits kubectl's stderr into what it complained about (every
// line but its info lines) and whether it logged marker.
func readStderr(stderr, marker string) (complaints string, spoke bool) {
	var keep []string
	for _, l := range strings.Split(stderr, "\n") {
		if marker != "" && strings.Contains(l, marker) {
			spoke = true
		}
		if l = strings.TrimSpace(l); l != "" && !klogInfo.MatchString(l) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n"), spoke
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append(lines[:n], fmt.Sprintf("(%d more lines)", len(lines)-n))
	}
	return strings.Join(lines, "\n")
}
