package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
)

// limenBin is the limen binary every scenario's gateway runs, built once
// per test binary (the link takes seconds).
var limenBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func binary(t *testing.T) string {
	t.Helper()
	limenBin.once.Do(func() {
		limenBin.dir, limenBin.err = os.MkdirTemp("", "limen-faults-bin-")
		if limenBin.err != nil {
			return
		}
		clustertest.AtTeardown(func() { _ = os.RemoveAll(limenBin.dir) })
		limenBin.path = filepath.Join(limenBin.dir, "limen")
		cmd := exec.Command("go", "build", "-o", limenBin.path, "./cmd/limen")
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			limenBin.err = fmt.Errorf("go build ./cmd/limen: %w\n%s", err, out)
		}
	})
	if limenBin.err != nil {
		t.Fatal(limenBin.err)
	}
	return limenBin.path
}

func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found at %s: %v", root, err)
	}
	return root
}

// setup is what a scenario asks of its gateway: extra arguments, and small
// disks (tmpfs of the given size in bytes) under the proxy's data
// directory, the worker's data directory or a recording store of its own.
type setup struct {
	opts                       gatewaytest.Options
	proxyDisk, workerDisk      int64
	recordingDisk              int64 // a separate recording store (--recording-store file://…)
	recordingStore, scratchDir string
}

// startGateway starts a proxy and a worker of the scenario's own, in a
// directory kept when the test fails (its logs say what happened).
func startGateway(t *testing.T, s *setup) *gatewaytest.Env {
	t.Helper()
	c := clustertest.Cluster(t)
	dir, err := os.MkdirTemp("", "limen-faults-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway logs kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	s.scratchDir = dir
	for _, d := range []struct {
		path string
		size int64
	}{{filepath.Join(dir, "proxy"), s.proxyDisk}, {filepath.Join(dir, "worker"), s.workerDisk}, {filepath.Join(dir, "recordings"), s.recordingDisk}} {
		if d.size > 0 {
			mountTmpfs(t, d.path, d.size)
		}
	}
	if s.recordingDisk > 0 {
		s.recordingStore = filepath.Join(dir, "recordings")
		s.opts.ProxyArgs = append(s.opts.ProxyArgs, "--recording-store", "file://"+s.recordingStore)
	}
	s.opts.Bin = binary(t)
	env, err := gatewaytest.StartWith(context.Background(), c, dir, logWriter{t}, s.opts)
	if err != nil {
		t.Fatalf("start gateway: %v", err)
	}
	t.Cleanup(env.Stop)
	return env
}

// mountTmpfs mounts a tmpfs of size bytes at dir (made if need be), and
// unmounts it when the test ends; it skips the test when mounting is not
// allowed here (not root, or a container without CAP_SYS_ADMIN).
func mountTmpfs(t *testing.T, dir string, size int64) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size))
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
		t.Skipf("cannot mount a tmpfs at %s to fill (%v): this scenario needs root or CAP_SYS_ADMIN", dir, err)
	}
	if err != nil {
		t.Fatalf("mount tmpfs at %s: %v", dir, err)
	}
	// After the gateway's Stop (cleanups run last first): no process
	// keeps the mount busy.
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

// logWriter sends the harness's progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
