// Command demo runs Limen's main job end to end on the embedded defaults:
// a real control plane, a limen proxy and worker, users who log in, and
// kubectl through Limen, printing each step. `make demo` runs it.
//
//	go run ./test/demo          run the demo and clean up
//	go run ./test/demo --keep   leave everything running until Ctrl-C
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/limenhq/limen/test/cluster/controlplane"
	"github.com/limenhq/limen/test/gatewaytest"
)

func main() {
	keep := flag.Bool("keep", false, "keep the control plane, proxy and worker running until Ctrl-C")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, keep bool) error {
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
	say("Starting limen proxy and limen worker, enrolling the worker with a one-time token")
	env, err := gatewaytest.Start(ctx, cp, filepath.Join(dir, "limen"), os.Stdout)
	if err != nil {
		return err
	}
	defer env.Stop()

	kubectl := controlplane.KubectlPath(cp)
	admin := func(args ...string) error {
		return show(ctx, kubectl, append([]string{"--kubeconfig", cp.Kubeconfig}, args...)...)
	}
	say("As the cluster admin (directly, not through Limen): a demo pod")
	if err := admin("run", "hello", "--image=local", "--restart=Never", "--", "sh", "-c", "echo hello from a pod; sleep 3600"); err != nil {
		return err
	}
	if err := admin("wait", "--for=condition=Ready", "pod/hello", "--timeout=60s"); err != nil {
		return err
	}
	for _, user := range []string{"alice", "bob"} {
		say("%s logs in (limen login) and writes a kubeconfig for cluster %q (limen kube login)", user, gatewaytest.ClusterName)
		kc, err := env.Login(ctx, user)
		if err != nil {
			return err
		}
		as := func(args ...string) error {
			return show(ctx, kubectl, append([]string{"--kubeconfig", kc}, args...)...)
		}
		fmt.Printf("  export KUBECONFIG=%s\n", kc)
		steps := [][]string{
			{"auth", "whoami"},
			{"get", "pods"},
			{"logs", "hello"},
			{"create", "configmap", "from-" + user, "--from-literal=by=" + user},
			{"get", "configmaps"},
			{"auth", "whoami", "--as=admin", "--as-group=system:masters"}, // Limen strips --as
		}
		for _, s := range steps {
			_ = as(s...) // a refusal is part of the demo
		}
	}
	say("The audit trail the proxy kept (limen audit search)")
	out, err := env.Limen(ctx, "", "", "audit", "search", "--data-dir", filepath.Join(env.Dir, "proxy"), "--since", "1h", "--type", "kube.request")
	fmt.Print(indent(out))
	if err != nil {
		return err
	}
	say("The web console")
	for _, u := range gatewaytest.Users {
		if u.Name == "admin" {
			fmt.Printf("  open https://%s/console/ (the proxy's own CA: accept its certificate, fingerprint %s)\n", env.ProxyAddr, env.Fingerprint)
			fmt.Printf("  sign in as %s, password %s (a demo admin); alice and bob see only their own sessions and recordings\n", u.Name, u.Password)
			if !keep {
				fmt.Println("  (the demo stops when it ends: make demo DEMO_FLAGS=--keep keeps the console up)")
			}
		}
	}
	if keep {
		say("Everything keeps running; press Ctrl-C to stop. Admin: export KUBECONFIG=%s", cp.Kubeconfig)
		<-ctx.Done()
	}
	say("Demo finished: kubectl went through Limen for every user request above.")
	return nil
}

func say(format string, args ...any) {
	fmt.Printf("\n==> "+format+"\n", args...)
}

// show prints a command and its output, as a user would see them.
func show(ctx context.Context, bin string, args ...string) error {
	printable := []string{"kubectl"}
	for i := 0; i < len(args); i++ {
		if args[i] == "--kubeconfig" {
			i++
			continue
		}
		printable = append(printable, args[i])
	}
	fmt.Printf("$ %s\n", strings.Join(printable, " "))
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var buf bytes.Buffer
	cmd := exec.CommandContext(cctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	fmt.Print(indent(buf.String()))
	return err
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "  " + strings.ReplaceAll(s, "\n", "\n  ") + "\n"
}
