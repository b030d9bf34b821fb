// Package clustertest shares one real control plane among the tests of a
// test binary: call Main from TestMain, then Cluster(t) and Namespace(t) in
// tests. Every process and directory is removed when the binary ends, also
// on failure, timeout (the children die with their parent) and Ctrl-C.
package clustertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/limenhq/limen/test/cluster/controlplane"
	"github.com/limenhq/limen/test/otlpsink"
)

// SkipEnv names the variable that, set to 1, skips every test needing the
// control plane (for quick unit runs).
const SkipEnv = "LIMEN_SKIP_CLUSTER"

var shared struct {
	once    sync.Once
	cluster *controlplane.Cluster
	traces  *otlpsink.Sink
	dir     string
	err     error
}

// Main runs the tests and then stops the shared control plane, if one was
// started. Use it as the body of TestMain.
func Main(m *testing.M) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		// Say so: the test output otherwise just stops, mid-test.
		fmt.Fprintf(os.Stderr, "clustertest: %v received; stopping the control plane and exiting without finishing the tests\n", s)
		teardown()
		os.Exit(130)
	}()
	code := m.Run()
	runFailed.Store(code != 0)
	teardown()
	os.Exit(code)
}

// AtTeardown registers fn to run once the package's tests are done (or
// interrupted), before the control plane stops: the place to stop what
// runs against it and remove its files.
func AtTeardown(fn func()) {
	teardowns.Lock()
	defer teardowns.Unlock()
	teardowns.fns = append(teardowns.fns, fn)
}

// RunFailed reports, in an AtTeardown function, whether a test failed.
func RunFailed() bool { return runFailed.Load() }

var runFailed atomic.Bool

var teardowns struct {
	sync.Mutex
	fns []func()
}

func teardown() {
	teardowns.Lock()
	fns := teardowns.fns
	teardowns.fns = nil
	teardowns.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
	if shared.cluster != nil {
		shared.cluster.Stop()
	}
	if shared.traces != nil {
		shared.traces.Stop()
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
}

// Cluster returns the shared control plane, starting it on first use. It
// skips the test when LIMEN_SKIP_CLUSTER=1.
func Cluster(t testing.TB) *controlplane.Cluster {
	t.Helper()
	if os.Getenv(SkipEnv) == "1" {
		t.Skip(SkipEnv + "=1: skipping a test that needs the control plane")
	}
	shared.once.Do(func() {
		removeStale()
		shared.dir, shared.err = os.MkdirTemp("", fmt.Sprintf("limen-cp-%d-", os.Getpid()))
		if shared.err != nil {
			return
		}
		// The API server sends its spans of traced requests here
		// (Traces); it traces no other request.
		if shared.traces, shared.err = otlpsink.Start(); shared.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		shared.cluster, shared.err = controlplane.Start(ctx, controlplane.Options{Dir: shared.dir, Progress: os.Stderr,
			TracingEndpoint: shared.traces.Addr})
	})
	if shared.err != nil {
		t.Fatalf("start control plane: %v", shared.err)
	}
	if err := shared.cluster.Failed(); err != nil {
		t.Fatalf("control plane is down: %v", err)
	}
	return shared.cluster
}

// Traces is the OTLP receiver the shared API server exports its spans to:
// those of requests that arrived inside a sampled trace. Limen's processes
// may export to it too (its Addr), so that a test sees one whole trace.
func Traces(t testing.TB) *otlpsink.Sink {
	Cluster(t)
	return shared.traces
}

// removeStale deletes the directories of earlier test binaries that died
// without cleaning up.
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "limen-cp-*-*"))
	for _, d := range dirs {
		parts := strings.SplitN(filepath.Base(d), "-", 4)
		pid, err := strconv.Atoi(parts[2])
		if err == nil && syscall.Kill(pid, 0) != nil {
			_ = os.RemoveAll(d)
		}
	}
}

var unsafeName = regexp.MustCompile(`[^a-z0-9-]+`)

// Namespace creates a fresh namespace for the test, waits until pods can be
// created in it (its default ServiceAccount exists), and deletes it after.
func Namespace(t testing.TB) string {
	t.Helper()
	c := Cluster(t)
	base := strings.Trim(unsafeName.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(base) > 40 {
		base = base[:40]
	}
	name := "t-" + base + "-" + rand.String(5)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	for {
		_, err := c.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return name
		}
		if !apierrors.IsNotFound(err) || ctx.Err() != nil {
			t.Fatalf("namespace %s: default ServiceAccount never appeared (is kube-controller-manager running?): %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Kubectl returns a kubectl binary of the given minor version ("1.29"), or
// the newest available for "". It prefers the versioned binaries of the
// Google Cloud SDK, then kubectl on PATH, then the one the harness built
// (v1.37). It skips the test when the asked version is not available.
func Kubectl(t testing.TB, minor string) string {
	t.Helper()
	versions := Versioned()
	if minor == "" {
		if len(versions) > 0 {
			return versions[len(versions)-1].Path
		}
		if p, err := exec.LookPath("kubectl"); err == nil {
			return p
		}
		return Cluster(t).Binaries.Path("kubectl")
	}
	for _, v := range versions {
		if v.Minor == minor {
			return v.Path
		}
	}
	if minor == "1.37" {
		return Cluster(t).Binaries.Path("kubectl")
	}
	t.Skipf("kubectl %s is not installed (looked in %s)", minor, sdkDir)
	return ""
}

const sdkDir = "/usr/lib/google-cloud-sdk/bin"

// KubectlBinary is one installed kubectl.
type KubectlBinary struct{ Minor, Path string }

// Versioned lists the installed kubectl.1.NN binaries, oldest first.
func Versioned() []KubectlBinary {
	paths, _ := filepath.Glob(filepath.Join(sdkDir, "kubectl.1.*"))
	var out []KubectlBinary
	for _, p := range paths {
		minor := strings.TrimPrefix(filepath.Base(p), "kubectl.")
		if _, err := strconv.Atoi(strings.TrimPrefix(minor, "1.")); err == nil {
			out = append(out, KubectlBinary{Minor: minor, Path: p})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, _ := strconv.Atoi(strings.TrimPrefix(out[i].Minor, "1."))
		b, _ := strconv.Atoi(strings.TrimPrefix(out[j].Minor, "1."))
		return a < b
	})
	return out
}

// RunPod creates a pod with one container running argv on the fake node and
// waits until it runs.
func RunPod(t testing.TB, namespace, name string, argv []string, tty bool) *corev1.Pod {
	t.Helper()
	c := Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: name, Image: "local", Command: argv, TTY: tty, Stdin: tty,
			}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	if _, err := c.Client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s/%s: %v", namespace, name, err)
	}
	for {
		got, err := c.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil && got.Status.Phase == corev1.PodRunning {
			return got
		}
		if ctx.Err() != nil {
			t.Fatalf("pod %s/%s did not reach Running: last %v, err %v", namespace, name, got.Status.Phase, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
