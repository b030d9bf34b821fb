package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/limenhq/limen/bench"
	"github.com/limenhq/limen/test/cluster/controlplane"
	"github.com/limenhq/limen/test/gatewaytest"
	"github.com/limenhq/limen/test/otlpsink"
)

// target is one way to reach the API server: direct, through the one-hop
// baseline, or through Limen.
type target struct {
	name       string
	base       string // URL prefix for API paths
	client     *http.Client
	kubeconfig string
	certFile   string // a baseline's certificate, the CA of a hop in front of it
}

// setup is the running system under measurement.
type setup struct {
	cluster  *controlplane.Cluster
	env      *gatewaytest.Env
	direct   target
	baseline target
	limen    target
	// traced is a second Limen with tracing on at 100%, exporting to an
	// OTLP receiver in this process; tracedProxy and tracedWorker are its
	// processes.
	traced                    target
	tracedProxy, tracedWorker int
	// The processes whose CPU and memory are read from /proc.
	apiserver, proxy, worker, baselinePID int
	// twoHops is a second careless proxy in front of the baseline: two
	// careless hops, the floor of any two-hop gateway (hopFloor).
	twoHops            target
	twoHopsPID         int
	zeroPort, sinkPort int
	copySource         string // the file kubectl cp moves (streams)
	// The proxy's and worker's pprof addresses (--debug-listen), and where
	// their profiles are written.
	proxyDebug, workerDebug string
	out                     string
}

func run(ctx context.Context, c config) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	r := &bench.Results{Started: time.Now(), LoadStart: bench.LoadAvg(), Requests: c.requests,
		StreamSize: c.streamSize, StreamRuns: c.streamRuns, Mode: map[bool]string{true: "quick", false: "full"}[c.quick]}
	machine(r, root, c)
	log := os.Stderr

	if c.only == "" {
		progress(log, "policy benchmark: %s", strings.Join(bench.PolicyBenchCommand(), " "))
		if r.Policy, err = bench.PolicyBench(ctx, root); err != nil {
			r.Notes = append(r.Notes, "policy benchmark failed: "+err.Error())
		}
	}

	dir, err := os.MkdirTemp("", "limen-bench-")
	if err != nil {
		return err
	}
	if c.keep {
		progress(log, "working directory (kept): %s", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	s, stop, err := start(ctx, dir)
	if err != nil {
		return err
	}
	defer stop()
	s.out = filepath.Join(root, "bench", "out")
	if err := os.MkdirAll(s.out, 0o755); err != nil {
		return err
	}

	if err := measure(ctx, c, s, r); err != nil {
		return err
	}
	r.LoadEnd = bench.LoadAvg()
	r.Duration = time.Since(r.Started)
	var buf bytes.Buffer
	r.Markdown(&buf)
	if err := os.WriteFile(c.out, buf.Bytes(), 0o644); err != nil {
		return err
	}
	progress(log, "wrote %s in %s", c.out, r.Duration.Round(time.Second))
	return nil
}

// start runs the control plane and Limen, creates the fixtures and returns
// the clients; stop ends everything.
func start(ctx context.Context, dir string) (_ *setup, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	cpDir := filepath.Join(dir, "cluster")
	if err := os.Mkdir(cpDir, 0o755); err != nil {
		return nil, stop, err
	}
	cluster, err := controlplane.Start(ctx, controlplane.Options{Dir: cpDir, Progress: os.Stderr})
	if err != nil {
		return nil, stop, fmt.Errorf("control plane: %w", err)
	}
	stops = append(stops, cluster.Stop)
	var debug [2]string
	for i := range debug {
		port, err := freePort()
		if err != nil {
			return nil, stop, err
		}
		debug[i] = fmt.Sprintf("127.0.0.1:%d", port)
	}
	env, err := gatewaytest.StartWith(ctx, cluster, dir, os.Stderr, gatewaytest.Options{
		ProxyArgs: []string{"--debug-listen", debug[0]}, WorkerArgs: []string{"--debug-listen", debug[1]}})
	if err != nil {
		return nil, stop, fmt.Errorf("limen: %w", err)
	}
	stops = append(stops, env.Stop)
	s := &setup{cluster: cluster, env: env, apiserver: cluster.PID("kube-apiserver"), proxy: env.ProxyPID(), worker: env.WorkerPID(),
		proxyDebug: debug[0], workerDebug: debug[1]}
	if s.apiserver == 0 || s.proxy == 0 || s.worker == 0 {
		return nil, stop, fmt.Errorf("process ids: kube-apiserver %d, proxy %d, worker %d", s.apiserver, s.proxy, s.worker)
	}
	if s.direct, err = newTarget("direct", cluster.Kubeconfig); err != nil {
		return nil, stop, err
	}
	baseline, pid, stopBaseline, err := startBaseline(ctx, dir, "baseline", cluster.Server, cluster.CAFile, env.TokenFile)
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, stopBaseline)
	s.baseline, s.baselinePID = baseline, pid
	front, pid, stopFront, err := startBaseline(ctx, dir, "two-hops", baseline.base, baseline.certFile, env.TokenFile)
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, stopFront)
	s.twoHops, s.twoHopsPID = front, pid
	kc, err := env.Login(ctx, "alice")
	if err != nil {
		return nil, stop, err
	}
	if s.limen, err = newTarget("limen", kc); err != nil {
		return nil, stop, err
	}
	if err := startTraced(ctx, s, dir, &stops); err != nil {
		return nil, stop, err
	}
	progress(os.Stderr, "fixtures: %d ConfigMaps, pods %s and %s", listSize+1, execPod, serverPod)
	if err := createFixtures(ctx, cluster.Client); err != nil {
		return nil, stop, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, stop, err
	}
	if s.zeroPort, err = freePort(); err != nil {
		return nil, stop, err
	}
	if s.sinkPort, err = freePort(); err != nil {
		return nil, stop, err
	}
	if err := startPods(ctx, cluster.Client, self, s.zeroPort, s.sinkPort); err != nil {
		return nil, stop, err
	}
	return s, stop, nil
}

// startTraced starts the second Limen, with tracing on at 100% sampling,
// and an OTLP receiver for its spans.
func startTraced(ctx context.Context, s *setup, dir string, stops *[]func()) error {
	sink, err := otlpsink.Start()
	if err != nil {
		return err
	}
	*stops = append(*stops, sink.Stop)
	tdir := filepath.Join(dir, "traced")
	if err := os.Mkdir(tdir, 0o755); err != nil {
		return err
	}
	otlp := []string{"--otlp-endpoint", "http://" + sink.Addr, "--trace-sample-ratio", "1"}
	env, err := gatewaytest.StartWith(ctx, s.cluster, tdir, os.Stderr, gatewaytest.Options{Bin: s.env.Bin, ProxyArgs: otlp, WorkerArgs: otlp})
	if err != nil {
		return fmt.Errorf("limen with tracing: %w", err)
	}
	*stops = append(*stops, env.Stop)
	s.tracedProxy, s.tracedWorker = env.ProxyPID(), env.WorkerPID()
	kc, err := env.Login(ctx, "alice")
	if err != nil {
		return err
	}
	s.traced, err = newTarget("limen, tracing on", kc)
	return err
}

// newTarget builds a raw HTTP client from a kubeconfig with client-go's own
// transport, so the credentials (client certificate, exec plugin) are real.
func newTarget(name, kubeconfig string) (target, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return target{}, fmt.Errorf("%s kubeconfig: %w", name, err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return target{}, fmt.Errorf("%s transport: %w", name, err)
	}
	return target{name: name, base: strings.TrimSuffix(cfg.Host, "/"), client: hc, kubeconfig: kubeconfig}, nil
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("run limen-bench inside the repository (no go.mod above the working directory)")
		}
		dir = parent
	}
}

func gitOutput(root string, args ...string) string {
	cmd := exec.Command("git", args...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
