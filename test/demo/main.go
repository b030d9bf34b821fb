// Command demo runs Limen's main job end to end on the embedded defaults: a
// real control plane, a limen proxy and worker, users who log in, and
// kubectl through Limen (test/demo/story), printing each command as typed
// and its output. `make demo` runs it; test/e2e/demo_test.go runs the same
// story in `make test`.
//
//	go run ./test/demo          run the demo and clean up
//	go run ./test/demo --keep   then keep everything running (the console too) until Ctrl-C
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/limenhq/limen/test/cluster/controlplane"
	"github.com/limenhq/limen/test/demo/story"
	"github.com/limenhq/limen/test/gatewaytest"
)

func main() {
	keep := flag.Bool("keep", false, "after the story, keep the control plane, proxy, worker and console running until Ctrl-C")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, keep bool) error {
	began := time.Now()
	dir, err := os.MkdirTemp("", "limen-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	say("Starting a real Kubernetes control plane on loopback (built once, then cached)")
	for _, d := range []string{"cluster", "limen"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: filepath.Join(dir, "cluster"), Progress: os.Stdout})
	if err != nil {
		return err
	}
	defer cp.Stop()
	say("Starting limen proxy and limen worker; the worker enrolls with a one-time join token and dials out to the proxy")
	env, err := gatewaytest.Start(ctx, cp, filepath.Join(dir, "limen"), os.Stdout)
	if err != nil {
		return err
	}
	defer env.Stop()
	fmt.Printf("  the path: kubectl --mTLS--> limen proxy %s --tunnel--> limen worker --impersonation--> kube-apiserver %s\n",
		env.ProxyAddr, cp.Server)

	if err := story.Run(ctx, env, story.Options{
		Kubectl:         controlplane.KubectlPath(cp),
		AdminKubeconfig: cp.Kubeconfig,
		Out:             os.Stdout,
	}); err != nil {
		return err
	}
	story.Console(os.Stdout, env, keep)
	if keep {
		say("Everything keeps running; press Ctrl-C to stop. The cluster's own admin: export KUBECONFIG=%s", cp.Kubeconfig)
		<-ctx.Done()
	}
	say("Demo finished in %s: every request of alice and bob above went through Limen, and is in its audit trail.", time.Since(began).Round(time.Second))
	return nil
}

func say(format string, args ...any) {
	fmt.Printf("\n==> "+format+"\n", args...)
}
