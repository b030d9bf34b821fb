package controlplane

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"
)

// KubeVersion is the Kubernetes release the harness builds.
const KubeVersion = "v1.37.2"

// Binaries is where a built control plane's executables are.
type Binaries struct {
	Dir string // holds kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kubectl
}

// Path returns the full path of one binary.
func (b Binaries) Path(name string) string { return filepath.Join(b.Dir, name) }

// buildSpec is one `go build` of several main packages from one pinned module.
type buildSpec struct {
	module   string   // directory under test/cluster/build
	packages []string // main packages; each becomes a binary named after its last element
	ldflags  string
}

func kubeLDFlags() string {
	const p = "k8s.io/component-base/version"
	return strings.Join([]string{
		"-s", "-w",
		"-X", p + ".gitVersion=" + KubeVersion,
		"-X", p + ".gitMajor=1",
		"-X", p + ".gitMinor=37",
		"-X", p + ".gitTreeState=clean",
		"-X", p + ".buildDate=1970-01-01T00:00:00Z",
	}, " ")
}

var buildSpecs = []buildSpec{
	{module: "etcd", packages: []string{"."}, ldflags: "-s -w"},
	{module: "kube", packages: []string{
		"k8s.io/kubernetes/cmd/kube-apiserver",
		"k8s.io/kubernetes/cmd/kube-controller-manager",
		"k8s.io/kubernetes/cmd/kube-scheduler",
		"k8s.io/kubernetes/cmd/kubectl",
	}, ldflags: kubeLDFlags()},
}

// SourceDir returns test/cluster/build, where the pinned build modules live.
// LIMEN_CLUSTER_SRC overrides it; otherwise it is found from this file's path.
func SourceDir() (string, error) {
	if d := os.Getenv("LIMEN_CLUSTER_SRC"); d != "" {
		return d, nil
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot locate test/cluster/build: set LIMEN_CLUSTER_SRC")
	}
	dir := filepath.Join(filepath.Dir(file), "..", "build")
	if _, err := os.Stat(filepath.Join(dir, "kube", "go.mod")); err != nil {
		return "", fmt.Errorf("test/cluster/build not found at %s (set LIMEN_CLUSTER_SRC): %w", dir, err)
	}
	return dir, nil
}

// CacheDir returns the directory cached builds live in: LIMEN_CLUSTER_CACHE, or
// limen/cluster in the user cache directory.
func CacheDir() (string, error) {
	if d := os.Getenv("LIMEN_CLUSTER_CACHE"); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no user cache directory (set LIMEN_CLUSTER_CACHE): %w", err)
	}
	return filepath.Join(base, "limen", "cluster"), nil
}

// Build builds every control-plane binary once per pinned version and returns
// where they are. A cached binary whose build inputs (go.mod, go.sum, ldflags,
// Go version) are unchanged is reused without running the go command. Progress
// goes to progress.
func Build(ctx context.Context, progress io.Writer) (Binaries, error) {
	src, err := SourceDir()
	if err != nil {
		return Binaries{}, err
	}
	cache, err := CacheDir()
	if err != nil {
		return Binaries{}, err
	}
	key, err := buildKey(src)
	if err != nil {
		return Binaries{}, err
	}
	out := filepath.Join(cache, key)
	bins := Binaries{Dir: out}
	if complete(out) {
		return bins, nil
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return Binaries{}, fmt.Errorf("create build cache: %w", err)
	}
	for _, s := range buildSpecs {
		if err := runBuild(ctx, src, out, s, progress); err != nil {
			return Binaries{}, err
		}
	}
	if err := os.WriteFile(filepath.Join(out, ".complete"), []byte(key+"\n"), 0o644); err != nil {
		return Binaries{}, err
	}
	return bins, nil
}

func complete(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ".complete"))
	return err == nil
}

// buildKey hashes every input that changes what is built.
func buildKey(src string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", runtime.Version(), KubeVersion)
	for _, s := range buildSpecs {
		fmt.Fprintf(h, "%s %v %s\n", s.module, s.packages, s.ldflags)
		for _, f := range []string{"go.mod", "go.sum", "main.go"} {
			b, err := os.ReadFile(filepath.Join(src, s.module, f))
			if err != nil && !os.IsNotExist(err) {
				return "", err
			}
			h.Write(b)
		}
	}
	return KubeVersion + "-" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

func runBuild(ctx context.Context, src, out string, s buildSpec, progress io.Writer) error {
	names := make([]string, len(s.packages))
	for i, p := range s.packages {
		names[i] = filepath.Base(p)
		if p == "." {
			names[i] = s.module
		}
	}
	args := []string{"build", "-v", "-trimpath", "-ldflags", s.ldflags}
	tmp, err := os.MkdirTemp(out, ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if len(s.packages) == 1 {
		args = append(args, "-o", filepath.Join(tmp, names[0]))
	} else {
		args = append(args, "-o", tmp+string(os.PathSeparator))
	}
	args = append(args, s.packages...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = filepath.Join(src, s.module)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	fmt.Fprintf(progress, "cluster: building %s (%s; the first build takes several minutes, later runs reuse %s)\n",
		strings.Join(names, ", "), KubeVersion, out)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start go build: %w", err)
	}
	tail := reportProgress(stderr, progress, strings.Join(names, ", "), start)
	last := tail() // the pipe must be drained before Wait
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", strings.Join(names, " "), err, last)
	}
	for _, n := range names {
		if err := os.Rename(filepath.Join(tmp, n), filepath.Join(out, n)); err != nil {
			return fmt.Errorf("install %s: %w", n, err)
		}
	}
	fmt.Fprintf(progress, "cluster: built %s in %s\n", strings.Join(names, ", "), time.Since(start).Round(time.Second))
	return nil
}

// reportProgress counts the packages `go build -v` names and prints a line
// every 15 seconds. The returned func waits for the end of r and gives the
// last lines, for errors.
func reportProgress(r io.Reader, w io.Writer, what string, start time.Time) func() string {
	var n atomic.Int64
	lines := make(chan []string, 1)
	done := make(chan struct{})
	go func() {
		var last []string
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			n.Add(1)
			last = append(last, sc.Text())
			if len(last) > 30 {
				last = last[1:]
			}
		}
		close(done)
		lines <- last
	}()
	go func() {
		t := time.NewTicker(15 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(w, "cluster: building %s: %d packages compiled, %s elapsed\n",
					what, n.Load(), time.Since(start).Round(time.Second))
			}
		}
	}()
	return func() string { return strings.Join(<-lines, "\n") }
}

// KubectlPath returns a kubectl for harness chores: the one on PATH, or the
// one built with the control plane.
func KubectlPath(c *Cluster) string {
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p
	}
	return c.Binaries.Path("kubectl")
}
