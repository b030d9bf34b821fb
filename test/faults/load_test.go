package faults

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
)

// load is what a scenario runs through Limen while its fault is on: a
// client-go GET every getEvery, each of a name of its own so that the audit
// trail can be matched to it (probe-N, which does not exist: the API
// server's 404 is the request served); a watch on the namespace's config
// maps, which a direct client changes every beatEvery; and kubectl exec of
// a command printing a line every 100 ms, started again whenever it ends.
type load struct {
	ns, pod    string
	kubeconfig string
	kubectl    string
	client     *kubernetes.Clientset

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	gets    []get
	watches []watchRun
	execs   []*execRun
}

// get is one GET as its client saw it.
type get struct {
	seq    int
	at     time.Time
	served bool   // the API server answered (200, or the 404 of probe-N)
	code   int    // the status otherwise (0: no response)
	msg    string // what the client was told, when not served
}

// watchRun is one watch from its start to its end.
type watchRun struct {
	start, end time.Time
	events     int
	err        string // why it ended, if not by the load's stop
}

// execRun is one kubectl exec: the lines the user saw, and how it ended.
type execRun struct {
	id         string // the command's last argument, in the audit's session.start
	start, end time.Time
	firstLine  time.Time
	lines      []string
	exit       int
	stderr     string
}

const (
	getEvery  = 50 * time.Millisecond
	beatEvery = 500 * time.Millisecond
	tickPod   = "tick"
)

// startLoad creates the namespace's pod and config map, and starts the
// load as user's kubeconfig kc; stop ends it.
func startLoad(t *testing.T, env *gatewaytest.Env, kc string) *load {
	t.Helper()
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, tickPod, []string{"sleep", "infinity"}, false)
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = -1, 0
	cfg.WarningHandler = rest.NoWarnings{} // the refusals are counted, not printed
	cfg.Timeout = 10 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := &load{ns: ns, pod: tickPod, kubeconfig: kc, kubectl: clustertest.Kubectl(t, ""), client: client}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	direct := env.Cluster.Client.CoreV1().ConfigMaps(ns)
	if _, err := direct.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "beat"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	l.wg.Go(func() { l.runGets(ctx) })
	l.wg.Go(func() { l.runWatch(ctx) })
	l.wg.Go(func() { l.runExecs(ctx) })
	l.wg.Go(func() {
		for n := 0; ctx.Err() == nil; n++ {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "beat"}, Data: map[string]string{"n": fmt.Sprint(n)}}
			_, _ = direct.Update(ctx, cm, metav1.UpdateOptions{})
			sleep(ctx, beatEvery)
		}
	})
	t.Cleanup(l.stop)
	return l
}

// stop ends the load and waits for its clients.
func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (l *load) runGets(ctx context.Context) {
	for seq := 0; ctx.Err() == nil; seq++ {
		g := get{seq: seq, at: time.Now()}
		_, err := l.client.CoreV1().ConfigMaps(l.ns).Get(ctx, probeName(seq), metav1.GetOptions{})
		if ctx.Err() != nil {
			return // cut by the stop: neither served nor refused
		}
		var st apierrors.APIStatus
		switch {
		case err == nil || apierrors.IsNotFound(err) && strings.Contains(err.Error(), probeName(seq)):
			g.served = true
		case errors.As(err, &st):
			g.code, g.msg = int(st.Status().Code), st.Status().Message
		default:
			g.msg = err.Error()
		}
		l.mu.Lock()
		l.gets = append(l.gets, g)
		l.mu.Unlock()
		sleep(ctx, getEvery)
	}
}

func probeName(seq int) string { return fmt.Sprintf("probe-%d", seq) }

func (l *load) runWatch(ctx context.Context) {
	for ctx.Err() == nil {
		r := watchRun{start: time.Now()}
		w, err := l.client.CoreV1().ConfigMaps(l.ns).Watch(ctx, metav1.ListOptions{})
		if err == nil {
			for ev := range w.ResultChan() {
				r.events++
				if s, ok := ev.Object.(*metav1.Status); ok {
					r.err = s.Message
				}
			}
			w.Stop()
			if r.err == "" {
				r.err = "the watch ended"
			}
		} else {
			r.err = err.Error()
		}
		r.end = time.Now()
		if ctx.Err() != nil {
			r.err = ""
		}
		l.mu.Lock()
		l.watches = append(l.watches, r)
		l.mu.Unlock()
		sleep(ctx, 200*time.Millisecond)
	}
}

// tickScript prints $0-N every 100 ms, $0 being the run's id, execTicks
// lines in all: each run is a session of a few seconds whose recording is
// uploaded while the load goes on.
const (
	tickScript = `i=0; while [ $i -lt 50 ]; do echo "$0-$i"; i=$((i+1)); sleep 0.1; done`
	execTicks  = 50
)

func (l *load) runExecs(ctx context.Context) {
	for n := 0; ctx.Err() == nil; n++ {
		r := &execRun{id: fmt.Sprintf("run%d", n), start: time.Now()}
		l.mu.Lock()
		l.execs = append(l.execs, r)
		l.mu.Unlock()
		cmd := exec.CommandContext(ctx, l.kubectl, "--kubeconfig", l.kubeconfig, "-n", l.ns, "exec", l.pod, "--",
			"sh", "-c", tickScript, r.id)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			r.stderr = err.Error()
			return
		}
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l.mu.Lock()
			if len(r.lines) == 0 {
				r.firstLine = time.Now()
			}
			r.lines = append(r.lines, sc.Text())
			l.mu.Unlock()
		}
		_ = cmd.Wait()
		l.mu.Lock()
		r.end, r.exit, r.stderr = time.Now(), cmd.ProcessState.ExitCode(), strings.TrimSpace(stderr.String())
		l.mu.Unlock()
		sleep(ctx, 500*time.Millisecond)
	}
}

// served counts the GETs served and refused in [from, to).
func (l *load) served(from, to time.Time) (served, refused int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, g := range l.gets {
		if g.at.Before(from) || !g.at.Before(to) {
			continue
		}
		if g.served {
			served++
		} else {
			refused++
		}
	}
	return served, refused
}

// refusals are the distinct answers the clients got instead of service
// since from, most frequent first, as "N× CODE message".
func (l *load) refusals(from time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	count := map[string]int{}
	for _, g := range l.gets {
		if !g.served && !g.at.Before(from) {
			count[fmt.Sprintf("%d %s", g.code, clip(timestamps.ReplaceAllString(g.msg, "…"), 160))]++
		}
	}
	var out []string
	for m, n := range count {
		out = append(out, fmt.Sprintf("%d× %s", n, m))
	}
	sort.Slice(out, func(i, j int) bool {
		return count[strings.SplitN(out[i], "× ", 2)[1]] > count[strings.SplitN(out[j], "× ", 2)[1]]
	})
	return out
}

// timestamps are the times in refusal messages, cut so that the same
// refusal at another second counts as the same.
var timestamps = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// recovered waits until a GET started after from is served, and returns
// how long after from that was; it fails the test after within.
func (l *load) recovered(t *testing.T, from time.Time, within time.Duration) time.Duration {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		l.mu.Lock()
		for _, g := range l.gets {
			if g.served && !g.at.Before(from) {
				l.mu.Unlock()
				return g.at.Sub(from)
			}
		}
		l.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no GET served within %s of the fault's end: the system did not recover by itself; last answers: %v", within, l.refusals(from))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// refusedWithin waits until a GET started after from is refused with
// want in its message, and returns how long after from that was.
func (l *load) refusedWithin(t *testing.T, from time.Time, within time.Duration, want string) time.Duration {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		l.mu.Lock()
		for _, g := range l.gets {
			if !g.served && !g.at.Before(from) && strings.Contains(g.msg, want) {
				l.mu.Unlock()
				return g.at.Sub(from)
			}
		}
		l.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no GET refused with %q within %s of the fault; answers since: %v", want, within, l.refusals(from))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// execBack waits until an exec prints its first line after from (one
// started before may have waited for the fault's end), and returns how
// long after from that was; it fails the test after within.
func (l *load) execBack(t *testing.T, from time.Time, within time.Duration) time.Duration {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		l.mu.Lock()
		for _, r := range l.execs {
			if len(r.lines) > 0 && !r.firstLine.Before(from) {
				l.mu.Unlock()
				return r.firstLine.Sub(from)
			}
		}
		l.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no exec printed within %s of the fault's end: %s", within, l.execSummary(from))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// execSummary tells how the execs that ended since from ended, and what
// the one still running has printed.
func (l *load) execSummary(from time.Time) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	count := map[string]int{}
	var order []string
	for _, r := range l.execs {
		if !r.end.IsZero() && r.end.Before(from) {
			continue
		}
		k := fmt.Sprintf("exit %d after %d lines: %s", r.exit, len(r.lines), clip(r.stderr, 200))
		if r.end.IsZero() {
			k = fmt.Sprintf("still running after %d lines, started %s after the fault", len(r.lines), r.start.Sub(from).Round(100*time.Millisecond))
		}
		if len(r.lines) == execTicks && r.exit == 0 {
			k = "whole (exit 0)"
		}
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
	}
	var parts []string
	for _, k := range order {
		parts = append(parts, fmt.Sprintf("%d× %s", count[k], k))
	}
	if len(parts) == 0 {
		return "no exec ended"
	}
	return strings.Join(parts, "; ")
}

// snapshot copies what the clients saw, for the invariants.
func (l *load) snapshot() (gets []get, watches []watchRun, execs []execRun) {
	l.mu.Lock()
	defer l.mu.Unlock()
	gets = append(gets, l.gets...)
	watches = append(watches, l.watches...)
	for _, r := range l.execs {
		c := *r
		c.lines = append([]string(nil), r.lines...)
		execs = append(execs, c)
	}
	return gets, watches, execs
}
