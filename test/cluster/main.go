// Command cluster runs Limen's test control plane by hand:
//
//	go run ./test/cluster build   build (once, cached) the pinned binaries
//	go run ./test/cluster up      start a control plane in the background and print its KUBECONFIG
//	go run ./test/cluster env     print the export line of the running control plane
//	go run ./test/cluster down    stop it and remove its files
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/limenhq/limen/test/cluster/controlplane"
)

const usage = `usage: go run ./test/cluster build|up|down|env

  build  build kube-apiserver, kube-controller-manager, kube-scheduler, kubectl
         (all ` + controlplane.KubeVersion + `) and etcd once; later calls reuse the cache
  up     start etcd, the control plane and a fake kubelet on loopback in the
         background, and print the export KUBECONFIG=… line
  env    print the export line for the running control plane
  down   stop the running control plane and remove its directory

The state directory is $LIMEN_CLUSTER_STATE or limen-cluster in the user cache
directory; builds are cached in $LIMEN_CLUSTER_CACHE or limen/cluster there.
`

func main() {
	if len(os.Args) != 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "build":
		var b controlplane.Binaries
		if b, err = controlplane.Build(ctx, os.Stderr); err == nil {
			fmt.Println(b.Dir)
		}
	case "up":
		err = up(ctx)
	case "serve": // the background process that `up` starts
		err = serve(ctx)
	case "env":
		err = env()
	case "down":
		err = down()
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func stateDir() (string, error) {
	if d := os.Getenv("LIMEN_CLUSTER_STATE"); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(base, "limen-cluster"), nil
}

func running(dir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil {
		return 0, false
	}
	return pid, syscall.Kill(pid, 0) == nil
}

func up(ctx context.Context) error {
	dir, err := stateDir()
	if err != nil {
		return err
	}
	if _, ok := running(dir); ok {
		return env()
	}
	if _, err := controlplane.Build(ctx, os.Stderr); err != nil {
		return err
	}
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(self, "serve")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // outlive this command
	if err := cmd.Start(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "cluster: starting in the background (log: %s)\n", logf.Name())
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			return env()
		}
		if syscall.Kill(cmd.Process.Pid, 0) != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	b, _ := os.ReadFile(logf.Name())
	return fmt.Errorf("control plane did not start:\n%s", b)
}

func serve(ctx context.Context) error {
	dir, err := stateDir()
	if err != nil {
		return err
	}
	cpDir := filepath.Join(dir, "cp")
	if err := os.MkdirAll(cpDir, 0o755); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c, err := controlplane.Start(ctx, controlplane.Options{Dir: cpDir, Progress: os.Stderr, Logger: logger})
	if err != nil {
		return err
	}
	defer c.Stop()
	if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "ready"), []byte(c.Kubeconfig+"\n"), 0o644); err != nil {
		return err
	}
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := c.Failed(); err != nil {
				return err
			}
		}
	}
}

func env() error {
	dir, err := stateDir()
	if err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(dir, "ready"))
	if _, ok := running(dir); err != nil || !ok {
		return errors.New("no control plane is running: start one with `go run ./test/cluster up`")
	}
	fmt.Printf("export KUBECONFIG=%s", b)
	return nil
}

func down() error {
	dir, err := stateDir()
	if err != nil {
		return err
	}
	if pid, ok := running(dir); ok {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		for i := 0; i < 150 && syscall.Kill(pid, 0) == nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	}
	fmt.Fprintln(os.Stderr, "cluster: stopped")
	return os.RemoveAll(dir)
}
