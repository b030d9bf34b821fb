package soak

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
)

// The API server's own end of a watch. test/cluster's kube-apiserver runs
// without --min-request-timeout, so its default of 1800 s applies: a watch
// that asks no timeoutSeconds is ended by the server after a random
// duration between 1× and 2× that (k8s.io/apiserver's watch handler), and
// one that asks timeoutSeconds after exactly that. Followed logs, execs
// and port-forwards have no such end.
const (
	minRequestTimeout = 1800 * time.Second
	// timeoutSlack is how far past its deadline a timed-out watch may be
	// seen to end: the server's timer, two hops and the client's read.
	timeoutSlack = 30 * time.Second
)

// Periodic traffic of a run.
const (
	changeEvery = 30 * time.Second // a ConfigMap update, which every watch of it must see
	echoEvery   = 10 * time.Second // an echo round over the port-forward, and GETs
	seenWithin  = 10 * time.Second // how soon after a change every watch must have seen it
	podName     = "ticker"
	tickCM      = "soak-tick"
)

// stream is one long-lived stream of the run and what happened to it.
type stream struct {
	name, kind string
	events     bool // it must see every ConfigMap change (or, for logs, every tick)

	mu       sync.Mutex
	opens    int
	open     bool
	last     int // the last value seen: the ConfigMap's n, or the log's tick
	lastAt   time.Time
	seen     int
	stalled  bool     // reported silent or behind; cleared by the next event
	timeouts []string // ends by Kubernetes' own watch timeouts
	drops    []string // every other end, gap and stall
}

func (s *stream) opened() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opens++
	s.open = true
	s.lastAt = time.Now()
}

func (s *stream) closed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open = false
}

func (s *stream) see(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen++
	s.stalled = false
	s.last = max(s.last, n)
	s.lastAt = time.Now()
}

func (s *stream) timedOut(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timeouts = append(s.timeouts, time.Now().UTC().Format("15:04:05")+" "+fmt.Sprintf(format, args...))
}

func (s *stream) dropped(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drops = append(s.drops, time.Now().UTC().Format("15:04:05")+" "+fmt.Sprintf(format, args...))
}

// kubeTimeout says whether a watch that ended cleanly after lasted ended by
// the API server's own timeout: timeoutSeconds if it asked one, else the
// server's 1×–2× --min-request-timeout.
func kubeTimeout(timeoutSeconds *int64, lasted time.Duration) (string, bool) {
	if timeoutSeconds != nil {
		want := time.Duration(*timeoutSeconds) * time.Second
		return fmt.Sprintf("timeoutSeconds=%d, ended after %s", *timeoutSeconds, lasted.Round(time.Second)),
			lasted >= want-time.Second && lasted <= want+timeoutSlack
	}
	return fmt.Sprintf("the API server's watch timeout (%s–%s), ended after %s", minRequestTimeout, 2*minRequestTimeout, lasted.Round(time.Second)),
		lasted >= minRequestTimeout-time.Second && lasted <= 2*minRequestTimeout+timeoutSlack
}

// soak is one run: its streams, its traffic counters and its samples.
type soak struct {
	t       *testing.T
	cfg     config
	env     *gatewaytest.Env
	ns      string
	kc      string // alice's kubeconfig through Limen
	kubectl string
	client  kubernetes.Interface // alice through Limen
	echo    string               // the pod's echo port on the fake node
	probes  []Probe
	commit  string // the tree under test, read at the start

	mu        sync.Mutex
	streams   []*stream
	changes   int       // ConfigMap updates done
	changedAt time.Time // when the last one was
	traffic   counters
	samples   []sample
}

// counters count the periodic traffic and its failures.
type counters struct {
	changes, changeFails int
	echoes, echoFails    int
	gets, getFails       int
	failures             []string
}

func (s *soak) fail(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.traffic.failures = append(s.traffic.failures, time.Now().UTC().Format("15:04:05")+" "+fmt.Sprintf(format, args...))
}

func (s *soak) newStream(name, kind string, events bool) *stream {
	st := &stream{name: name, kind: kind, events: events}
	s.mu.Lock()
	s.streams = append(s.streams, st)
	s.mu.Unlock()
	return st
}

func TestSoak(t *testing.T) {
	if os.Getenv(envSoak) == "" {
		t.Skipf("%s is not set: the soak runs for an hour (make soak; SOAK_DURATION sizes it)", envSoak)
	}
	cfg := loadConfig(t)
	c := clustertest.Cluster(t)
	s := &soak{t: t, cfg: cfg, kubectl: clustertest.Kubectl(t, ""), commit: commit()}
	s.env, s.probes = StartGateway(t, c, "soak")
	s.ns = clustertest.Namespace(t)
	s.echo = serveEcho(t)
	clustertest.RunPod(t, s.ns, podName, []string{"sh", "-c", "i=0; while :; do i=$((i+1)); echo tick-$i; sleep 1; done"}, false)
	var err error
	if s.kc, err = s.env.Login(context.Background(), "alice"); err != nil {
		t.Fatalf("login alice: %v", err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", s.kc)
	if err != nil {
		t.Fatal(err)
	}
	if s.client, err = kubernetes.NewForConfig(rc); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.CoreV1().ConfigMaps(s.ns).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: tickCM, Labels: map[string]string{"soak": "tick"}},
		Data:       map[string]string{"n": "0"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ConfigMap %s through Limen: %v", tickCM, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	run := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }

	noTimeout := func() *int64 { return nil }
	reflectorTimeout := func() *int64 { // as client-go's reflector picks it: 5–10 min
		n, _ := rand.Int(rand.Reader, big.NewInt(300))
		v := 300 + n.Int64()
		return &v
	}
	for _, w := range []struct {
		name     string
		resource string
		timeout  func() *int64
	}{
		{"client-go watch of the ConfigMap (no timeoutSeconds)", "configmaps", noTimeout},
		{"client-go watch of the ConfigMap (timeoutSeconds 300–600, as a reflector)", "configmaps", reflectorTimeout},
		{"client-go watch of Secrets (no events at all)", "secrets", noTimeout},
	} {
		st := s.newStream(w.name, "watch", w.resource == "configmaps")
		run(func() { s.clientWatch(ctx, st, w.resource, w.timeout) })
	}
	for _, w := range []struct{ name, selector string }{
		{"kubectl get configmap soak-tick -w", "metadata.name=" + tickCM},
		{"kubectl get configmaps -l soak=tick -w", ""},
	} {
		st := s.newStream(w.name, "watch", true)
		run(func() { s.kubectlWatch(ctx, st, w.selector) })
	}
	logs := s.newStream("kubectl logs -f "+podName, "logs", true)
	run(func() { s.followLog(ctx, logs) })
	pf := s.newStream("kubectl port-forward pod/"+podName, "portforward", false)
	pfAddr := make(chan string, 1)
	run(func() { s.portForward(ctx, pf, pfAddr) })

	// The streams open; then the run's clock and the baseline sample.
	if err := s.waitOpen(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	var addr string
	select {
	case addr = <-pfAddr:
	case <-ctx.Done():
	}
	started := time.Now()
	t.Logf("soak: %d streams open through Limen; holding them for %s (until %s UTC)", len(s.streams), cfg.duration,
		started.Add(cfg.duration).UTC().Format("15:04:05"))
	s.sample(ctx, started)
	run(func() { s.changeLoop(ctx) })
	run(func() { s.echoLoop(ctx, pf, addr) })
	run(func() { s.checkLoop(ctx) })
	// The last sample is taken at the end of the duration, streams still
	// open; then they close.
	for i := 1; time.Duration(i)*cfg.sample <= cfg.duration; i++ {
		sleepCtx(ctx, time.Until(started.Add(time.Duration(i)*cfg.sample)))
		s.sample(ctx, started)
	}
	cancel()
	wg.Wait()

	rep := s.report(started)
	t.Log("\n" + rep.text)
	if cfg.report != "" {
		if err := os.WriteFile(cfg.report, []byte(rep.text), 0o644); err != nil {
			t.Errorf("write %s (%s): %v", cfg.report, envReport, err)
		} else {
			t.Logf("soak: report written to %s", cfg.report)
		}
	}
	for _, f := range rep.failures {
		t.Error(f)
	}
}

// serveEcho listens on a loopback port, which the fake node's pods share,
// and echoes every connection back: the port-forward's far end.
func serveEcho(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// waitOpen waits until every stream has opened once.
func (s *soak) waitOpen(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		var waiting []string
		s.mu.Lock()
		for _, st := range s.streams {
			st.mu.Lock()
			if st.opens == 0 {
				waiting = append(waiting, st.name)
			}
			st.mu.Unlock()
		}
		s.mu.Unlock()
		if len(waiting) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("streams not open within %s: %s (logs in %s)", within, strings.Join(waiting, "; "), s.env.Dir)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// clientWatch holds a client-go watch open until ctx ends. An end by
// Kubernetes' own timeout is noted and the watch resumed from the last
// resourceVersion, as a reflector would; any other end is a drop.
func (s *soak) clientWatch(ctx context.Context, st *stream, resource string, timeout func() *int64) {
	rv := ""
	for ctx.Err() == nil {
		opts := metav1.ListOptions{ResourceVersion: rv, TimeoutSeconds: timeout()}
		var w watch.Interface
		var err error
		if resource == "configmaps" {
			opts.FieldSelector = "metadata.name=" + tickCM
			w, err = s.client.CoreV1().ConfigMaps(s.ns).Watch(ctx, opts)
		} else {
			w, err = s.client.CoreV1().Secrets(s.ns).Watch(ctx, opts)
		}
		if err != nil {
			if ctx.Err() == nil {
				st.dropped("open failed: %v", err)
				sleepCtx(ctx, 5*time.Second)
			}
			continue
		}
		began := time.Now()
		st.opened()
		reason := ""
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Error:
				reason = "error event: " + apierrors.FromObject(ev.Object).Error()
			case watch.Added, watch.Modified:
				if cm, ok := ev.Object.(*corev1.ConfigMap); ok {
					rv = cm.ResourceVersion
					n, _ := strconv.Atoi(cm.Data["n"])
					st.see(n)
				}
			}
		}
		w.Stop()
		st.closed()
		if ctx.Err() != nil {
			return
		}
		lasted := time.Since(began)
		if reason == "" {
			if why, ok := kubeTimeout(opts.TimeoutSeconds, lasted); ok {
				st.timedOut("%s; resumed", why)
				continue
			}
			reason = "the result channel closed without an error event"
		}
		st.dropped("ended after %s: %s", lasted.Round(time.Second), reason)
		rv = "" // start over, as after a 410
	}
}

// kubectlWatch holds `kubectl get configmap -w` open until ctx ends; it
// prints the ConfigMap's n at each event. kubectl sends no timeoutSeconds,
// so the server's own timeout may end it: noted, and kubectl started again.
func (s *soak) kubectlWatch(ctx context.Context, st *stream, fieldSelector string) {
	for ctx.Err() == nil {
		args := []string{"--kubeconfig", s.kc, "-n", s.ns, "get", "configmaps", "-w", "-o", `jsonpath={.data.n}{"\n"}`}
		if fieldSelector != "" {
			args = append(args, "--field-selector", fieldSelector)
		} else {
			args = append(args, "-l", "soak=tick")
		}
		began := time.Now()
		code, stderr := s.runLines(ctx, st, args, func(l string) {
			if n, err := strconv.Atoi(strings.TrimSpace(l)); err == nil {
				st.see(n)
			}
		})
		if ctx.Err() != nil {
			return
		}
		lasted := time.Since(began)
		if why, ok := kubeTimeout(nil, lasted); ok {
			st.timedOut("%s (kubectl exit %d%s); started again", why, code, quoted(stderr))
			continue
		}
		st.dropped("kubectl exited %d after %s%s", code, lasted.Round(time.Second), quoted(stderr))
		sleepCtx(ctx, 5*time.Second)
	}
}

// followLog holds `kubectl logs -f` of the ticking pod open until ctx ends
// and checks that its ticks arrive one by one, none missing.
func (s *soak) followLog(ctx context.Context, st *stream) {
	for ctx.Err() == nil {
		prev := 0
		args := []string{"--kubeconfig", s.kc, "-n", s.ns, "logs", "-f", podName}
		began := time.Now()
		code, stderr := s.runLines(ctx, st, args, func(l string) {
			n, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(l), "tick-"))
			if err != nil {
				st.dropped("unexpected log line %q", l)
				return
			}
			if prev != 0 && n != prev+1 {
				st.dropped("log jumped from tick-%d to tick-%d", prev, n)
			}
			prev = n
			st.see(n)
		})
		if ctx.Err() != nil {
			return
		}
		st.dropped("kubectl logs -f exited %d after %s%s", code, time.Since(began).Round(time.Second), quoted(stderr))
		sleepCtx(ctx, 5*time.Second)
	}
}

// runLines runs kubectl until it exits or ctx ends, passing each line of
// its stdout to line; it returns the exit code and the end of stderr.
func (s *soak) runLines(ctx context.Context, st *stream, args []string, line func(string)) (int, string) {
	cmd := exec.CommandContext(ctx, s.kubectl, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var errb tailBuffer
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		return -1, err.Error()
	}
	if err := cmd.Start(); err != nil {
		return -1, err.Error()
	}
	st.opened()
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line(sc.Text())
	}
	err = cmd.Wait()
	st.closed()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	return code, errb.String()
}

// portForward holds `kubectl port-forward` to the echo port open until ctx
// ends; its local address goes to addr once.
func (s *soak) portForward(ctx context.Context, st *stream, addr chan<- string) {
	sent := false
	for ctx.Err() == nil {
		args := []string{"--kubeconfig", s.kc, "-n", s.ns, "port-forward", "pod/" + podName, ":" + s.echo}
		began := time.Now()
		code, stderr := s.runLines(ctx, st, args, func(l string) {
			if a, ok := strings.CutPrefix(l, "Forwarding from "); ok && !sent && strings.HasPrefix(a, "127.0.0.1:") {
				addr <- strings.Fields(a)[0]
				sent = true
			}
		})
		if ctx.Err() != nil {
			return
		}
		st.dropped("kubectl port-forward exited %d after %s%s", code, time.Since(began).Round(time.Second), quoted(stderr))
		if !sent {
			return // no address ever: the run reports it
		}
		sleepCtx(ctx, 5*time.Second)
	}
}

// changeLoop updates the ConfigMap every changeEvery through Limen.
func (s *soak) changeLoop(ctx context.Context) {
	t := time.NewTicker(changeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		n := s.changes + 1
		s.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_, err := s.client.CoreV1().ConfigMaps(s.ns).Update(cctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: tickCM, Labels: map[string]string{"soak": "tick"}},
			Data:       map[string]string{"n": strconv.Itoa(n)},
		}, metav1.UpdateOptions{})
		cancel()
		s.mu.Lock()
		s.traffic.changes++
		if err == nil {
			s.changes, s.changedAt = n, time.Now()
		} else if ctx.Err() == nil {
			s.traffic.changeFails++
		}
		s.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			s.fail("ConfigMap update %d through Limen: %v", n, err)
		}
	}
}

// echoLoop sends an echo round every echoEvery over a connection held open
// through the port-forward, and another over a fresh connection, and GETs
// the ConfigMap and lists the pods.
func (s *soak) echoLoop(ctx context.Context, pf *stream, addr string) {
	if addr == "" {
		return
	}
	var held net.Conn
	defer func() {
		if held != nil {
			held.Close()
		}
	}()
	t := time.NewTicker(echoEvery)
	defer t.Stop()
	for round := 1; ; round++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if held == nil {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				s.echoed(ctx, round, "held connection: dial", err)
				continue
			}
			held = c
		}
		if err := echoRound(held, round); err != nil {
			s.echoed(ctx, round, "held connection", err)
			held.Close()
			held = nil
		} else {
			pf.see(round)
			s.echoed(ctx, round, "", nil)
		}
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err == nil {
			err = echoRound(c, round)
			c.Close()
		}
		if err == nil {
			pf.see(round)
		}
		s.echoed(ctx, round, "fresh connection", err)

		gctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_, err1 := s.client.CoreV1().ConfigMaps(s.ns).Get(gctx, tickCM, metav1.GetOptions{})
		_, err2 := s.client.CoreV1().Pods(s.ns).List(gctx, metav1.ListOptions{})
		cancel()
		s.mu.Lock()
		s.traffic.gets += 2
		for _, err := range []error{err1, err2} {
			if err != nil && ctx.Err() == nil {
				s.traffic.getFails++
				s.traffic.failures = append(s.traffic.failures, time.Now().UTC().Format("15:04:05")+" GET through Limen: "+err.Error())
			}
		}
		s.mu.Unlock()
	}
}

func (s *soak) echoed(ctx context.Context, round int, what string, err error) {
	if ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	s.traffic.echoes++
	if err != nil {
		s.traffic.echoFails++
	}
	s.mu.Unlock()
	if err != nil {
		s.fail("echo round %d over the port-forward (%s): %v", round, what, err)
	}
}

// echoRound writes 64 random bytes and reads them back within 10 s.
func echoRound(c net.Conn, round int) error {
	msg := make([]byte, 64)
	_, _ = rand.Read(msg)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("round %d: echo returned other bytes", round)
	}
	return nil
}

// checkLoop checks every echoEvery that every open watch of the ConfigMap
// has seen its last change (made more than seenWithin ago), and that the
// followed log is live: a stream that is open but silent is a drop nobody
// was told of.
func (s *soak) checkLoop(ctx context.Context) {
	t := time.NewTicker(echoEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		n, at := s.changes, s.changedAt
		streams := append([]*stream(nil), s.streams...)
		s.mu.Unlock()
		for _, st := range streams {
			st.mu.Lock()
			open, last, lastAt, stalled := st.open, st.last, st.lastAt, st.stalled
			st.mu.Unlock()
			if !open || !st.events || stalled || time.Since(lastAt) < seenWithin {
				continue
			}
			var why string
			switch {
			case st.kind == "logs":
				why = fmt.Sprintf("silent for %s: the pod prints a line every second", time.Since(lastAt).Round(time.Second))
			case last < n && time.Since(at) > seenWithin:
				why = fmt.Sprintf("open but behind: saw n=%d, the ConfigMap is at n=%d since %s", last, n, time.Since(at).Round(time.Second))
			default:
				continue
			}
			st.dropped("%s", why)
			st.mu.Lock()
			st.stalled = true
			st.mu.Unlock()
		}
	}
}

// sample reads every probe once.
func (s *soak) sample(ctx context.Context, started time.Time) {
	sm := sample{at: time.Now(), load: loadAvg()}
	for _, p := range s.probes {
		st, err := p.Read(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.fail("sample: %v", err)
			}
			return
		}
		sm.stats = append(sm.stats, st)
	}
	s.mu.Lock()
	for _, st := range s.streams {
		st.mu.Lock()
		if st.open {
			sm.open++
		}
		st.mu.Unlock()
	}
	s.samples = append(s.samples, sm)
	s.mu.Unlock()
	s.t.Logf("soak: t=%s %s", sm.at.Sub(started).Round(time.Second), sm)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func quoted(stderr string) string {
	stderr = strings.TrimSpace(stderr)
	if stderr == "" {
		return ""
	}
	return fmt.Sprintf(", stderr %q", stderr)
}

// tailBuffer keeps the last 2 KiB written to it.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 2048 {
		t.b = t.b[len(t.b)-2048:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
