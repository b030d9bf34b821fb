// Command limen-bench measures Limen against direct access to the same API
// server in one run: it starts the test control plane and a real limen proxy
// and worker, creates its fixtures, runs the load and writes a Markdown
// report (bench/RESULTS.md). `make bench` and `make bench-quick` run it.
//
// `limen-bench serve-zero` is the port-forward target it runs as a pod;
// `limen-bench serve-baseline` is the one-hop baseline proxy it runs beside
// Limen.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/limenhq/limen/bench"
)

// config is one run's settings, from the flags.
type config struct {
	quick      bool
	out        string
	label      string // how the run was invoked, for the report
	kubectl    string
	keep       bool
	profile    bool
	requests   int
	watches    int
	streamSize int64
	streamRuns int
	only       string // "streams": run the stream table alone
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve-zero" {
		if err := serveZero(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "serve-zero:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "serve-baseline" {
		if err := serveBaseline(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "serve-baseline:", err)
			os.Exit(1)
		}
		return
	}
	var c config
	flag.BoolVar(&c.quick, "quick", false, "a run of under two minutes: fewer requests, watches and stream bytes")
	flag.StringVar(&c.out, "out", "bench/RESULTS.md", "where to write the report")
	flag.StringVar(&c.label, "label", "", "how the run was invoked (for example \"make bench\"), for the report")
	flag.StringVar(&c.kubectl, "kubectl", "", "kubectl for the exec and port-forward figures (default: the newest installed)")
	flag.BoolVar(&c.keep, "keep", false, "keep the working directory (logs of the control plane, proxy and worker)")
	flag.BoolVar(&c.profile, "profile", false, "profile the proxy and worker (pprof, and strace for fsync) for the report when a goal is not met (default on without -quick)")
	flag.IntVar(&c.requests, "requests", 0, "requests per latency cell (default 2000; 250 with -quick)")
	flag.IntVar(&c.watches, "watches", 0, "idle watches (default 1000; 200 with -quick)")
	flag.StringVar(&c.only, "only", "", `"streams" runs only the stream table (with -profile, the profiles of its rows), for work on the stream path`)
	flag.Parse()
	if c.only != "" && c.only != "streams" {
		fmt.Fprintf(os.Stderr, "limen-bench: -only %q is not a phase; the one phase it can run alone is \"streams\"\n", c.only)
		os.Exit(2)
	}
	c.defaults()
	if !c.quick && !flagSet("profile") {
		c.profile = true
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute) // the run ends by itself
	defer cancel()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "limen-bench:", err)
		os.Exit(1)
	}
}

func (c *config) defaults() {
	full := map[bool][4]int64{false: {2000, 1000, 128 << 20, 3}, true: {250, 200, 32 << 20, 1}}[c.quick]
	if c.requests <= 0 {
		c.requests = int(full[0])
	}
	if c.watches <= 0 {
		c.watches = int(full[1])
	}
	c.streamSize, c.streamRuns = full[2], int(full[3])
	if c.kubectl == "" {
		c.kubectl = newestKubectl()
	}
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// newestKubectl prefers the newest versioned kubectl of the Google Cloud SDK,
// then kubectl on PATH.
func newestKubectl() string {
	paths, _ := filepath.Glob("/usr/lib/google-cloud-sdk/bin/kubectl.1.*")
	best, bestMinor := "", -1
	for _, p := range paths {
		var minor int
		if _, err := fmt.Sscanf(filepath.Base(p), "kubectl.1.%d", &minor); err == nil && minor > bestMinor {
			best, bestMinor = p, minor
		}
	}
	if best != "" {
		return best
	}
	return "kubectl"
}

// serveZero is the port-forward pod: it writes zeros to every connection on
// -addr for -for, then exits.
func serveZero(args []string) error {
	fs := flag.NewFlagSet("serve-zero", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address of the server writing zeros (port-forward down)")
	sinkAddr := fs.String("sink-addr", "", "listen address of the server reading uploads (port-forward up); none if empty")
	life := fs.Duration("for", time.Hour, "exit after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *life)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Either server failing ends both: the pod exits, and the bench says so.
	sinkErr := make(chan error, 1)
	go func() {
		if *sinkAddr == "" {
			sinkErr <- nil
			return
		}
		err := bench.ServeSink(ctx, *sinkAddr)
		cancel()
		sinkErr <- err
	}()
	err := bench.ServeZero(ctx, *addr)
	cancel()
	return errors.Join(err, <-sinkErr)
}

// machine fills in what the report says about the machine and the run.
func machine(r *bench.Results, root string, c config) {
	r.Cores = runtime.NumCPU()
	r.GoVersion = runtime.Version()
	r.CPUModel = "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				r.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	r.Commit = gitOutput(root, "rev-parse", "HEAD")
	if gitOutput(root, "status", "--porcelain", "--untracked-files=no") != "" {
		r.Commit += " (the working tree had uncommitted changes of other work in progress)"
	}
	args := []string{"limen-bench"}
	for _, a := range os.Args[1:] {
		if strings.ContainsAny(a, " \"'") {
			a = strconv.Quote(a)
		}
		args = append(args, a)
	}
	r.Command = strings.Join(args, " ")
	if c.label != "" {
		r.Command = c.label + "` → `" + r.Command
	}
	r.Kubectl = c.kubectl
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// progress prints one line on stderr.
func progress(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "limen-bench: "+format+"\n", args...)
}
