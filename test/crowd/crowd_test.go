package crowd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
	"github.com/limenhq/limen/test/soak"
)

// What a run promises.
const (
	// endWithin is the lock's promise (DESIGN.md §2): every open stream of
	// the locked user ends within a second, on both hops.
	endWithin = time.Second
	// settleWithin is how long the processes get, after the last stream
	// ended, to come back to their baseline.
	settleWithin = 2 * time.Minute
	// The baseline bounds, per process, after the settle: the goroutines
	// of the streams all gone, the live heap (HeapAlloc after a GC) and
	// the resident set back within a few MiB of where they were before the
	// streams opened. The runtime keeps every goroutine's g (~0.4 KiB)
	// for reuse, 1.5 MiB after 4,000; it keeps partly used spans
	// (HeapInuse, reported, not bounded) and returns pages to the OS only
	// gradually.
	boundGoroutines = 5
	boundHeap       = 4 << 20
	boundRSS        = 24 << 20
	// openers is how many streams are being opened at once.
	openers = 16
	// lockReason is what the lock says; a stream's end must come from it.
	lockReason = "crowd: one lock for every stream"
)

// kind is one sort of stream of the crowd.
type kind string

const (
	kindWatch kind = "watch"
	kindLogs  kind = "logs -f"
	kindExec  kind = "exec (WebSocket)"
	kindSPDY  kind = "exec (SPDY)"
)

// kindOf spreads the kinds over the streams: 4 in 10 watches, 3 followed
// logs, 3 execs (of which every other over SPDY, the rest over WebSocket as
// kubectl does by default).
func kindOf(i int) kind {
	switch i % 10 {
	case 0, 1, 2, 3:
		return kindWatch
	case 4, 5, 6:
		return kindLogs
	case 7, 9:
		return kindExec
	default:
		return kindSPDY
	}
}

// crowdStream is one stream: when it ended and how.
type crowdStream struct {
	kind  kind
	ended chan struct{}
	at    time.Time // when the client saw its end
	err   error     // what the client was told
}

func (s *crowdStream) end(err error) {
	s.at, s.err = time.Now(), err
	close(s.ended)
}

// run is the shared state of one crowd run.
type run struct {
	t       *testing.T
	env     *gatewaytest.Env
	probes  []soak.Probe
	ns      string
	rc      *rest.Config
	hc      *http.Client
	client  kubernetes.Interface
	streams []*crowdStream
}

func TestCrowd(t *testing.T) {
	n := streams(t)
	c := clustertest.Cluster(t)
	r := &run{t: t}
	// The proxy lets n+64 connections come from one address: each exec is
	// a connection of its own (an HTTP/1.1 upgrade), all from loopback.
	r.env, r.probes = soak.StartGateway(t, c, "crowd", "--max-conns-per-ip", strconv.Itoa(n+64))
	r.ns = clustertest.Namespace(t)
	clustertest.RunPod(t, r.ns, "talker", []string{"sh", "-c", "while :; do echo tick; sleep 1; done"}, false)
	clustertest.RunPod(t, r.ns, "shell", []string{"sleep", "infinity"}, false)
	r.login()
	ctx := context.Background()
	if _, err := r.client.CoreV1().ConfigMaps(r.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "crowd"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ConfigMap through Limen: %v", err)
	}
	t.Cleanup(func() { _, _ = r.env.Limen(context.Background(), "admin", "", "unlock", "alice") })

	// Warm up: one stream of each kind, opened and closed, so that the
	// baseline holds the connections and caches any use would make.
	r.warmUp()
	base := r.settled(ctx, nil, 10*time.Second)
	t.Logf("crowd: baseline %s", base)
	r.saveHeaps(ctx, "baseline")

	opened := time.Now()
	r.open(ctx, n)
	t.Logf("crowd: %d streams open through Limen in %s; load %s", n, time.Since(opened).Round(time.Millisecond), loadAvg())
	time.Sleep(2 * time.Second)
	peak := r.read(ctx)
	peakLoad := loadAvg()
	t.Logf("crowd: with %d streams open: %s", n, peak)
	for _, s := range r.streams {
		select {
		case <-s.ended:
			t.Fatalf("a %s stream ended before the lock: %v", s.kind, s.err)
		default:
		}
	}

	lockStart := time.Now()
	if _, err := r.env.Limen(ctx, "admin", "", "lock", "alice", "--reason", lockReason); err != nil {
		t.Fatal(err)
	}
	locked := time.Now()
	lockLoad := loadAvg()
	late := r.waitEnds(locked.Add(10 * time.Second))
	lat, fromStart := r.latencies(locked), r.latencies(lockStart)
	t.Logf("crowd: limen lock took %s; from its return to each end: %s; from its start: %s", locked.Sub(lockStart).Round(time.Millisecond), lat, fromStart)

	_, _ = r.env.Limen(ctx, "admin", "", "unlock", "alice")
	r.hc.CloseIdleConnections() // the client's own pool, not the streams'
	settleStart := time.Now()
	after := r.settled(ctx, base, settleWithin)
	settle := time.Since(settleStart)
	t.Logf("crowd: after the lock and %s: %s", settle.Round(time.Second), after)
	r.saveHeaps(ctx, "after")

	rep := r.report(n, base, peak, after, lat, fromStart, late, locked.Sub(lockStart), settle, peakLoad, lockLoad)
	t.Log("\n" + rep.text)
	if p := os.Getenv(envReport); p != "" {
		if err := os.WriteFile(p, []byte(rep.text), 0o644); err != nil {
			t.Errorf("write %s (%s): %v", p, envReport, err)
		}
	}
	for _, f := range rep.failures {
		t.Error(f)
	}
}

// login makes alice's client-go config through Limen: one HTTP client
// (HTTP/2, many streams on a connection) for watches and logs, no client
// rate limit (the crowd opens at once).
func (r *run) login() {
	kc, err := r.env.Login(context.Background(), "alice")
	if err != nil {
		r.t.Fatalf("login alice: %v", err)
	}
	if r.rc, err = clientcmd.BuildConfigFromFlags("", kc); err != nil {
		r.t.Fatal(err)
	}
	r.rc.QPS, r.rc.Burst = -1, 0
	if r.hc, err = rest.HTTPClientFor(r.rc); err != nil {
		r.t.Fatal(err)
	}
	if r.client, err = kubernetes.NewForConfigAndClient(r.rc, r.hc); err != nil {
		r.t.Fatal(err)
	}
}

// warmUp opens and closes one stream of each kind.
func (r *run) warmUp() {
	ctx, cancel := context.WithCancel(context.Background())
	var ws []*crowdStream
	for i := range 10 {
		s, err := r.openOne(ctx, kindOf(i))
		if err != nil {
			r.t.Fatalf("warm-up %s: %v", kindOf(i), err)
		}
		ws = append(ws, s)
	}
	cancel()
	for _, s := range ws {
		select {
		case <-s.ended:
		case <-time.After(30 * time.Second):
			r.t.Fatalf("warm-up %s did not end when its client gave up", s.kind)
		}
	}
}

// open opens n streams, openers at a time, and returns once each is
// confirmed live end to end.
func (r *run) open(ctx context.Context, n int) {
	r.streams = make([]*crowdStream, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, openers)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r.streams[i], errs[i] = r.openOne(ctx, kindOf(i))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		r.t.Fatalf("open the streams: %v (logs in %s)", err, r.env.Dir)
	}
}

// openOne opens one stream and returns once data came through it: the
// watch's first event, the log's first line, the exec's echo of a line.
func (r *run) openOne(ctx context.Context, k kind) (*crowdStream, error) {
	s := &crowdStream{kind: k, ended: make(chan struct{})}
	live := make(chan error, 1)
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	switch k {
	case kindWatch:
		w, err := r.client.CoreV1().ConfigMaps(r.ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=crowd"})
		if err != nil {
			return nil, fmt.Errorf("watch: %w", err)
		}
		go func() {
			first := true
			var err error
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					err = fmt.Errorf("watch error event: %w", apierrors.FromObject(ev.Object))
				}
				if first {
					first = false
					live <- err
				}
			}
			s.end(err)
		}()
	case kindLogs:
		tail := int64(1)
		body, err := r.client.CoreV1().Pods(r.ns).GetLogs("talker", &corev1.PodLogOptions{Follow: true, TailLines: &tail}).Stream(ctx)
		if err != nil {
			return nil, fmt.Errorf("logs -f: %w", err)
		}
		go func() {
			defer body.Close()
			sc := bufio.NewScanner(body)
			first := true
			for sc.Scan() {
				if first {
					first = false
					live <- nil
				}
			}
			s.end(sc.Err())
		}()
	case kindExec, kindSPDY:
		if err := r.exec(ctx, s, k, live); err != nil {
			return nil, err
		}
	}
	select {
	case err := <-live:
		if err != nil {
			return nil, err
		}
		return s, nil
	case <-s.ended:
		return nil, fmt.Errorf("%s ended before any data came: %v", k, s.err)
	case <-octx.Done():
		return nil, fmt.Errorf("%s: no data within a minute", k)
	}
}

// exec runs cat in the shell pod; the line the client writes comes back
// and says the stream is live. Stdin stays open, so cat runs until the
// stream is cut.
func (r *run) exec(ctx context.Context, s *crowdStream, k kind, live chan<- error) error {
	u := r.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(r.ns).Name("shell").SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "shell", Command: []string{"cat"}, Stdin: true, Stdout: true}, scheme.ParameterCodec).URL()
	var ex remotecommand.Executor
	var err error
	if k == kindSPDY {
		ex, err = remotecommand.NewSPDYExecutor(r.rc, http.MethodPost, u)
	} else {
		ex, err = remotecommand.NewWebSocketExecutor(r.rc, http.MethodGet, u.String())
	}
	if err != nil {
		return fmt.Errorf("%s: %w", k, err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() {
		err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW})
		outW.CloseWithError(cmpErr(err))
		inW.Close()
		s.end(err)
	}()
	go func() { _, _ = io.WriteString(inW, "ping\n") }()
	go func() {
		sc := bufio.NewScanner(outR)
		if sc.Scan() && sc.Text() == "ping" {
			live <- nil
		}
		_, _ = io.Copy(io.Discard, outR)
	}()
	return nil
}

func cmpErr(err error) error {
	if err == nil {
		return io.EOF
	}
	return err
}

// waitEnds waits until every stream has ended or the deadline passed; it
// returns how many had not ended by then.
func (r *run) waitEnds(deadline time.Time) int {
	late := 0
	for _, s := range r.streams {
		select {
		case <-s.ended:
		case <-time.After(time.Until(deadline)):
			late++
		}
	}
	return late
}

// latencies are, per kind and over all, the time from the lock command's
// return to each client seeing its stream end.
type latencies map[kind][]time.Duration

const allKinds kind = "all"

func (r *run) latencies(locked time.Time) latencies {
	l := latencies{}
	for _, s := range r.streams {
		select {
		case <-s.ended:
			d := s.at.Sub(locked)
			l[s.kind] = append(l[s.kind], d)
			l[allKinds] = append(l[allKinds], d)
		default:
		}
	}
	for _, ds := range l {
		slices.Sort(ds)
	}
	return l
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(q * float64(len(ds)-1))
	return ds[i]
}

func (l latencies) String() string {
	ds := l[allKinds]
	return fmt.Sprintf("%d ended, p50 %s, p99 %s, max %s", len(ds), ms(quantile(ds, 0.5)), ms(quantile(ds, 0.99)), ms(quantile(ds, 1)))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

// reading is one Probe reading of each process.
type reading []soak.Stats

func (rd reading) String() string {
	var b []string
	for i, st := range rd {
		b = append(b, fmt.Sprintf("%s RSS %s MiB live heap %s MiB (spans in use %s MiB) goroutines %d", probeNames[i], soak.MiB(st.RSS), soak.MiB(st.HeapAlloc), soak.MiB(st.HeapInuse), st.Goroutines))
	}
	return strings.Join(b, "; ")
}

var probeNames = []string{"proxy", "worker"}

// saveHeaps keeps each process's heap profile in the Env's directory
// (kept when the test fails): `go tool pprof -base proxy-heap-baseline.pb.gz
// proxy-heap-after.pb.gz` shows what the streams left behind.
func (r *run) saveHeaps(ctx context.Context, when string) {
	for _, p := range r.probes {
		if err := p.SaveHeap(ctx, filepath.Join(r.env.Dir, p.Name+"-heap-"+when+".pb.gz")); err != nil {
			r.t.Logf("crowd: %v", err)
		}
	}
}

func (r *run) read(ctx context.Context) reading {
	var rd reading
	for _, p := range r.probes {
		st, err := p.Read(ctx)
		if err != nil {
			r.t.Fatal(err)
		}
		rd = append(rd, st)
	}
	return rd
}

// settled reads the processes every 2 s until they are within the bounds
// of base (or, without a base, until two readings agree on the goroutines)
// or within has passed, and returns the last reading.
func (r *run) settled(ctx context.Context, base reading, within time.Duration) reading {
	deadline := time.Now().Add(within)
	prev := r.read(ctx)
	for time.Now().Before(deadline) {
		time.Sleep(2 * time.Second)
		rd := r.read(ctx)
		if base == nil && rd[0].Goroutines == prev[0].Goroutines && rd[1].Goroutines == prev[1].Goroutines {
			return rd
		}
		if base != nil && len(overBounds(base, rd)) == 0 {
			return rd
		}
		prev = rd
	}
	return prev
}

// overBounds says, for each process and figure, where after is past the
// baseline's bound.
func overBounds(base, after reading) []string {
	var out []string
	for i := range base {
		b, a := base[i], after[i]
		if d := a.Goroutines - b.Goroutines; d > boundGoroutines {
			out = append(out, fmt.Sprintf("%s goroutines %d → %d (+%d, bound +%d)", probeNames[i], b.Goroutines, a.Goroutines, d, boundGoroutines))
		}
		if d := a.HeapAlloc - b.HeapAlloc; d > boundHeap {
			out = append(out, fmt.Sprintf("%s live heap %s → %s MiB (bound +%s MiB)", probeNames[i], soak.MiB(b.HeapAlloc), soak.MiB(a.HeapAlloc), soak.MiB(boundHeap)))
		}
		if d := a.RSS - b.RSS; d > boundRSS {
			out = append(out, fmt.Sprintf("%s RSS %s → %s MiB (bound +%s MiB)", probeNames[i], soak.MiB(b.RSS), soak.MiB(a.RSS), soak.MiB(boundRSS)))
		}
	}
	return out
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
