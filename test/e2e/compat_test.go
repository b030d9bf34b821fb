package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limenhq/limen/test/cluster/clustertest"
)

// The compatibility matrix (issue #21): every row runs through Limen with a
// kubeconfig written by limen kube login, against the real control plane,
// once per kubectl binary; other clients (client-go, Helm, the Python
// client, the JavaScript client) follow in compat_clients_test.go and
// compat_javascript_test.go. One proxy, one worker and one
// control plane serve the whole matrix, as they serve the e2e suite.
//
// Which kubectl binaries run: in make test the oldest and the newest of
// the machine's kubectl.1.NN; with LIMEN_COMPAT=all (make compat) every
// one of them and the one the harness builds. LIMEN_COMPAT_OUT names a
// Markdown file the matrix is written to (make compat: test/e2e/COMPAT.md).

// compatEnv names the environment variable that selects every kubectl.
const compatEnv = "LIMEN_COMPAT"

// compatOutEnv names the file the matrix is written to.
const compatOutEnv = "LIMEN_COMPAT_OUT"

// compatCase is what one row gets: a kubectl, a fresh kubeconfig and a
// namespace of its own with a pod that sleeps and one that talks.
type compatCase struct {
	bin, kubeconfig, ns string
	dir                 string // scratch files
}

// run runs kubectl with the case's kubeconfig in its namespace.
func (c compatCase) run(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, append([]string{"--kubeconfig", c.kubeconfig, "-n", c.ns}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("kubectl %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// ok runs kubectl and fails unless it exits 0 with want in its output.
func (c compatCase) ok(t *testing.T, stdin, want string, args ...string) string {
	t.Helper()
	out, errOut, code := c.run(t, stdin, args...)
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("kubectl %s: exit %d, stdout %q, stderr %q; want %q", strings.Join(args, " "), code, out, errOut, want)
	}
	return out
}

// start starts a long-running kubectl and returns its output screen and a
// stop function (also run at cleanup).
func (c compatCase) start(t *testing.T, args ...string) (*clustertest.Screen, func()) {
	t.Helper()
	cmd := exec.Command(c.bin, append([]string{"--kubeconfig", c.kubeconfig, "-n", c.ns}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb lockedBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			kill := time.AfterFunc(5*time.Second, func() { _ = cmd.Process.Kill() })
			_ = cmd.Wait()
			kill.Stop()
			if t.Failed() {
				t.Logf("kubectl %v stderr: %s", args, errb.String())
			}
		})
	}
	t.Cleanup(stop)
	return clustertest.NewScreen(stdout), stop
}

// compatRow is one command of the matrix. run fails the test, or skips it
// through skipRow with the reason the table shows.
type compatRow struct {
	name string
	run  func(t *testing.T, c compatCase)
}

// compatResult is one cell of the table.
type compatResult struct {
	client, row, outcome, reason string
}

// compatResults collects the cells of the whole run, in order.
var compatResults struct {
	sync.Mutex
	cells []compatResult
}

// skipReasons holds each skipped test's reason for the table.
var skipReasons sync.Map // test name → reason

// skipRow skips a row with a reason the table shows.
func skipRow(t *testing.T, format string, args ...any) {
	t.Helper()
	reason := fmt.Sprintf(format, args...)
	skipReasons.Store(t.Name(), reason)
	t.Skip(reason)
}

// record runs f as the subtest row of client and records its outcome.
func record(t *testing.T, client, row string, f func(t *testing.T)) {
	t.Helper()
	var name string
	var failed, skipped bool
	t.Run(row, func(t *testing.T) {
		name = t.Name()
		t.Cleanup(func() { failed, skipped = t.Failed(), t.Skipped() })
		f(t)
	})
	if name == "" {
		return // not selected by -run: no cell
	}
	res := compatResult{client: client, row: row, outcome: "pass"}
	switch {
	case failed:
		res.outcome = "FAIL"
	case skipped:
		res.outcome = "skip"
		if r, ok := skipReasons.Load(name); ok {
			res.reason = r.(string)
		}
	}
	compatResults.Lock()
	compatResults.cells = append(compatResults.cells, res)
	compatResults.Unlock()
}

// compatKubectls are the kubectl binaries the matrix runs: see compatEnv.
func compatKubectls(t *testing.T) []clustertest.KubectlBinary {
	all := clustertest.Versioned()
	if os.Getenv(compatEnv) == "all" {
		return append(all, clustertest.KubectlBinary{Minor: "1.37", Path: clustertest.Kubectl(t, "1.37")})
	}
	switch len(all) {
	case 0:
		return []clustertest.KubectlBinary{{Minor: "1.37", Path: clustertest.Kubectl(t, "1.37")}}
	case 1:
		return all
	}
	return []clustertest.KubectlBinary{all[0], all[len(all)-1]}
}

// TestCompat is the matrix: every row with every selected kubectl, then
// the other clients, then the table.
func TestCompat(t *testing.T) {
	start := time.Now()
	kc := userKubeconfig(t, "alice")
	for _, k := range compatKubectls(t) {
		client := "kubectl " + k.Minor
		t.Run(client, func(t *testing.T) {
			ns := clustertest.Namespace(t)
			clustertest.RunPod(t, ns, "shell", []string{"sleep", "infinity"}, false)
			clustertest.RunPod(t, ns, "talker", []string{"sh", "-c", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done"}, false)
			c := compatCase{bin: k.Path, kubeconfig: kc, ns: ns, dir: t.TempDir()}
			for _, row := range kubectlRows() {
				record(t, client, row.name, func(t *testing.T) { row.run(t, c) })
			}
		})
	}
	for _, oc := range otherClients() {
		t.Run(oc.client, func(t *testing.T) {
			ns := clustertest.Namespace(t)
			for _, row := range oc.rows {
				record(t, oc.client, row.name, func(t *testing.T) { row.run(t, compatCase{kubeconfig: kc, ns: ns, dir: t.TempDir()}) })
			}
		})
	}
	table := compatTable()
	t.Logf("compatibility matrix (%s):\n%s", time.Since(start).Round(time.Second), table)
	if out := os.Getenv(compatOutEnv); out != "" {
		if err := os.WriteFile(out, []byte(compatMarkdown(table)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// kubectlRows are the matrix's kubectl commands, in the order they run.
func kubectlRows() []compatRow {
	return []compatRow{
		{"get", func(t *testing.T, c compatCase) {
			c.ok(t, "", "configmap/c-get created", "create", "configmap", "c-get", "--from-literal=k=v")
			c.ok(t, "", "v", "get", "configmap", "c-get", "-o", "jsonpath={.data.k}")
		}},
		{"list", func(t *testing.T, c compatCase) {
			c.ok(t, "", "pod/shell", "get", "pods", "-o", "name")
			c.ok(t, "", "shell", "get", "pods", "-A", "--field-selector", "metadata.namespace="+c.ns)
		}},
		{"get -w", func(t *testing.T, c compatCase) {
			screen, stop := c.start(t, "get", "configmaps", "-w", "-o", "name")
			defer stop()
			screen.WaitFor(t, "configmap/kube-root-ca.crt")
			c.ok(t, "", "created", "create", "configmap", "c-watched")
			screen.WaitFor(t, "configmap/c-watched")
		}},
		{"get --raw", func(t *testing.T, c compatCase) {
			c.ok(t, "", `"gitVersion"`, "get", "--raw", "/version")
			c.ok(t, "", "ok", "get", "--raw", "/readyz")
			c.ok(t, "", `"kind":"PodList"`, "get", "--raw", "/api/v1/namespaces/"+c.ns+"/pods")
		}},
		{"apply (client side)", func(t *testing.T, c compatCase) {
			c.ok(t, configMapYAML("c-apply", "one"), "configmap/c-apply created", "apply", "-f", "-")
			c.ok(t, configMapYAML("c-apply", "two"), "configmap/c-apply configured", "apply", "-f", "-")
			c.ok(t, "", "two", "get", "configmap", "c-apply", "-o", "jsonpath={.data.k}")
		}},
		{"apply --server-side", func(t *testing.T, c compatCase) {
			c.ok(t, configMapYAML("c-ssa", "one"), "configmap/c-ssa serverside-applied", "apply", "--server-side", "-f", "-")
			c.ok(t, configMapYAML("c-ssa", "two"), "configmap/c-ssa serverside-applied", "apply", "--server-side", "-f", "-")
			c.ok(t, "", "two", "get", "configmap", "c-ssa", "-o", "jsonpath={.data.k}")
		}},
		{"diff", func(t *testing.T, c compatCase) {
			c.ok(t, configMapYAML("c-diff", "before"), "created", "apply", "-f", "-")
			out, errOut, code := c.run(t, configMapYAML("c-diff", "after"), "diff", "-f", "-")
			// diff exits 1 when it found differences.
			if code != 1 || !strings.Contains(out, "-  k: before") || !strings.Contains(out, "+  k: after") {
				t.Fatalf("kubectl diff: exit %d, stdout %q, stderr %q", code, out, errOut)
			}
		}},
		{"patch", func(t *testing.T, c compatCase) {
			c.ok(t, "", "created", "create", "configmap", "c-patch", "--from-literal=k=v1")
			c.ok(t, "", "configmap/c-patch patched", "patch", "configmap", "c-patch", "-p", `{"data":{"k":"v2"}}`)
			c.ok(t, "", "configmap/c-patch patched", "patch", "configmap", "c-patch", "--type=json", "-p", `[{"op":"replace","path":"/data/k","value":"v3"}]`)
			c.ok(t, "", "v3", "get", "configmap", "c-patch", "-o", "jsonpath={.data.k}")
		}},
		{"delete --wait", func(t *testing.T, c compatCase) {
			c.ok(t, "", "created", "create", "configmap", "c-delete")
			c.ok(t, "", `configmap "c-delete" deleted`, "delete", "configmap", "c-delete", "--wait=true")
			if out, errOut, code := c.run(t, "", "get", "configmap", "c-delete"); code == 0 || !strings.Contains(errOut, "NotFound") {
				t.Fatalf("get after delete: exit %d, %q %q", code, out, errOut)
			}
		}},
		{"rollout status", func(t *testing.T, c compatCase) {
			c.ok(t, deploymentYAML("web"), "deployment.apps/web created", "apply", "-f", "-")
			c.ok(t, "", "successfully rolled out", "rollout", "status", "deployment/web", "--timeout=90s")
		}},
		{"wait --for", func(t *testing.T, c compatCase) {
			c.ok(t, "", "condition met", "wait", "--for=condition=Ready", "pod/shell", "--timeout=60s")
			c.ok(t, "", "created", "create", "configmap", "c-wait")
			if _, errOut, code := c.run(t, "", "delete", "configmap", "c-wait", "--wait=false"); code != 0 {
				t.Fatalf("delete: %s", errOut)
			}
			if out, errOut, code := c.run(t, "", "wait", "--for=delete", "configmap/c-wait", "--timeout=60s"); code != 0 {
				t.Fatalf("wait --for=delete: exit %d %q %q", code, out, errOut)
			}
		}},
		{"explain", func(t *testing.T, c compatCase) {
			c.ok(t, "", "containers", "explain", "pods.spec")
		}},
		{"api-resources", func(t *testing.T, c compatCase) {
			out := c.ok(t, "", "configmaps", "api-resources")
			if !strings.Contains(out, "deployments") {
				t.Fatalf("api-resources lacks deployments: %q", out)
			}
		}},
		{"auth can-i", func(t *testing.T, c compatCase) {
			c.ok(t, "", "yes", "auth", "can-i", "create", "configmaps")
			if out, _, code := c.run(t, "", "auth", "can-i", "create", "clusterroles"); code == 0 || !strings.Contains(out, "no") {
				t.Fatalf("auth can-i create clusterroles: exit %d %q; alice holds limen:edit only", code, out)
			}
			c.ok(t, "", "configmaps", "auth", "can-i", "--list")
		}},
		{"auth whoami", func(t *testing.T, c compatCase) {
			out, errOut, code := c.run(t, "", "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
			if code != 0 && strings.Contains(errOut, "selfsubjectreviews API is not enabled") {
				// kubectl before 1.28 asks for the alpha or beta API, which
				// newer API servers no longer serve: the same directly?
				direct := c
				direct.kubeconfig = clustertest.Cluster(t).Kubeconfig
				if _, derr, dcode := direct.run(t, "", "auth", "whoami"); dcode != 0 && strings.Contains(derr, "selfsubjectreviews API is not enabled") {
					skipRow(t, "kubectl before 1.28 asks for SelfSubjectReview v1alpha1/v1beta1, which the v1.37 API server no longer serves; the same without Limen")
				}
			}
			if code != 0 || out != "alice" {
				t.Fatalf("auth whoami: exit %d, %q, %q", code, out, errOut)
			}
		}},
		{"exec", func(t *testing.T, c compatCase) {
			out, errOut, code := c.run(t, "through stdin\n", "exec", "-i", "shell", "--", "sh", "-c", "cat; echo to-stderr >&2; exit 3")
			if code != 3 || out != "through stdin\n" || !strings.Contains(errOut, "to-stderr") {
				t.Fatalf("exec -i: exit %d, stdout %q, stderr %q; want 3, the input, to-stderr", code, out, errOut)
			}
		}},
		{"exec -it", func(t *testing.T, c compatCase) {
			cmd := exec.Command(c.bin, "--kubeconfig", c.kubeconfig, "-n", c.ns, "exec", "-it", "shell", "--", "sh")
			ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 100, Rows: 30})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); ptmx.Close() }()
			screen := clustertest.NewScreen(ptmx)
			send := func(s string) { _, _ = io.WriteString(ptmx, s) }
			send("tty\n")
			screen.WaitFor(t, "/dev/pts/")
			screen.Retype(t, send, "stty size", "30 100")
			send("exit 4\n")
			if err := cmd.Wait(); exitCode(t, err, context.Background()) != 4 {
				t.Fatalf("exec -it: %v, want exit 4", err)
			}
		}},
		{"attach", func(t *testing.T, c compatCase) {
			screen, stop := c.start(t, "attach", "talker")
			defer stop()
			first := screen.WaitForLine(t, "tick ")
			var n int
			fmt.Sscanf(first, "tick %d", &n)
			screen.WaitFor(t, fmt.Sprintf("tick %d", n+2))
		}},
		{"cp to the pod", func(t *testing.T, c compatCase) {
			local := filepath.Join(c.dir, "up.txt")
			if err := os.WriteFile(local, []byte("up through limen\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			// Pods are processes on the fake node: the pod's file system is
			// this machine's.
			remote := filepath.Join(c.dir, "in-pod.txt")
			if _, errOut, code := c.run(t, "", "cp", local, c.ns+"/shell:"+remote); code != 0 {
				t.Fatalf("cp to the pod: exit %d, %s", code, errOut)
			}
			if got, err := os.ReadFile(remote); err != nil || string(got) != "up through limen\n" {
				t.Fatalf("the pod has %q, %v", got, err)
			}
		}},
		{"cp from the pod", func(t *testing.T, c compatCase) {
			remote := filepath.Join(c.dir, "pod-file.txt")
			if err := os.WriteFile(remote, []byte("down through limen\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			local := filepath.Join(c.dir, "down.txt")
			if _, errOut, code := c.run(t, "", "cp", c.ns+"/shell:"+remote, local); code != 0 {
				t.Fatalf("cp from the pod: exit %d, %s", code, errOut)
			}
			if got, err := os.ReadFile(local); err != nil || string(got) != "down through limen\n" {
				t.Fatalf("copied %q, %v", got, err)
			}
		}},
		{"port-forward", func(t *testing.T, c compatCase) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "from the pod "+r.URL.Path)
			})}
			go func() { _ = srv.Serve(l) }()
			defer srv.Close()
			cmd := exec.Command(c.bin, "--kubeconfig", c.kubeconfig, "-n", c.ns, "port-forward", "pod/shell",
				fmt.Sprintf(":%d", l.Addr().(*net.TCPAddr).Port))
			addr, stop := clustertest.PortForward(t, cmd)
			defer stop()
			for i := range 2 {
				body := httpGet(t, fmt.Sprintf("http://%s/r%d", addr, i))
				if want := fmt.Sprintf("from the pod /r%d", i); body != want {
					t.Fatalf("through port-forward: %q, want %q", body, want)
				}
			}
		}},
		{"logs -f", func(t *testing.T, c compatCase) {
			screen, stop := c.start(t, "logs", "-f", "talker")
			defer stop()
			first := screen.WaitForLine(t, "tick ")
			var n int
			fmt.Sscanf(first, "tick %d", &n)
			screen.WaitFor(t, fmt.Sprintf("tick %d", n+2))
		}},
		{"debug", func(t *testing.T, c compatCase) {
			c.ok(t, "", "", "debug", "pod/shell", "--copy-to=shell-debug", "--image=local", "--container=debugger",
				"--", "sh", "-c", "echo debug-ok; sleep 3600")
			c.ok(t, "", "condition met", "wait", "--for=condition=Ready", "pod/shell-debug", "--timeout=60s")
			for deadline := time.Now().Add(30 * time.Second); ; {
				out, _, _ := c.run(t, "", "logs", "shell-debug", "-c", "debugger")
				if strings.Contains(out, "debug-ok") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the debug container's output never showed: %q", out)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}},
		{"events", func(t *testing.T, c compatCase) {
			cl := clustertest.Cluster(t).Client
			now := metav1.NewTime(time.Now())
			_, err := cl.CoreV1().Events(c.ns).Create(context.Background(), &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Name: "compat-event"},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: c.ns, Name: "shell"},
				Reason:         "CompatCheck", Message: "seen through limen", Type: corev1.EventTypeNormal,
				FirstTimestamp: now, LastTimestamp: now, Count: 1,
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			c.ok(t, "", "CompatCheck", "events")
		}},
		{"proxy", func(t *testing.T, c compatCase) {
			screen, stop := c.start(t, "proxy", "--port=0")
			defer stop()
			line := screen.WaitForLine(t, "Starting to serve on ")
			addr := strings.TrimSpace(strings.TrimPrefix(line, "Starting to serve on "))
			if body := httpGet(t, "http://"+addr+"/version"); !strings.Contains(body, `"gitVersion"`) {
				t.Fatalf("GET /version through kubectl proxy: %q", body)
			}
			if body := httpGet(t, "http://"+addr+"/api/v1/namespaces/"+c.ns+"/pods/shell"); !strings.Contains(body, `"name": "shell"`) &&
				!strings.Contains(body, `"name":"shell"`) {
				t.Fatalf("GET the pod through kubectl proxy: %q", body)
			}
		}},
		{"top", func(t *testing.T, c compatCase) {
			if _, _, code := c.run(t, "", "get", "--raw", "/apis/metrics.k8s.io/v1beta1"); code != 0 {
				skipRow(t, "no metrics API: the control plane serves no metrics.k8s.io (no metrics-server)")
			}
			c.ok(t, "", "shell", "top", "pod")
		}},
		{"unknown cluster says so", func(t *testing.T, c compatCase) {
			// alice's policy gives her a group on every cluster name, so the
			// proxy finds no worker; bob's gives him none on it. Either way
			// kubectl prints Limen's reason, naming the cluster.
			for _, tt := range []struct{ user, want string }{
				{"alice", `no Limen worker is connected for cluster "nowhere": the cluster is unknown`},
				{"bob", `Limen policy grants bob no group on cluster "nowhere": the cluster is unknown or you have no access`},
			} {
				u := c
				u.kubeconfig = retarget(t, userKubeconfig(t, tt.user), c.dir, tt.user, "nowhere")
				for _, args := range [][]string{{"get", "--raw", "/version"}, {"get", "pods"}} {
					out, errOut, code := u.run(t, "", args...)
					if code == 0 || !strings.Contains(errOut, tt.want) {
						t.Errorf("%s: kubectl %s on an unknown cluster: exit %d, stdout %q, stderr %q; want kubectl to print %q",
							tt.user, strings.Join(args, " "), code, out, errOut, tt.want)
					}
				}
			}
		}},
	}
}

// retarget copies user's kubeconfig with its server name naming cluster
// instead.
func retarget(t *testing.T, kubeconfig, dir, user, cluster string) string {
	t.Helper()
	data, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(data), `"tls-server-name": "demo.kube.`, `"tls-server-name": "`+cluster+`.kube.`, 1)
	if s == string(data) {
		t.Fatalf("kubeconfig %s has no tls-server-name for demo", kubeconfig)
	}
	out := filepath.Join(dir, "kubeconfig-"+user+"-"+cluster+".json")
	if err := os.WriteFile(out, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

func configMapYAML(name, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  k: %s\n", name, value)
}

func deploymentYAML(name string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
spec:
  replicas: 1
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: %[1]s
        image: local
        command: ["sleep", "infinity"]
`, name)
}

// compatTable renders the results: kubectl commands as a matrix (one row
// per command, one column per kubectl), the other clients as a list, each
// cell pass, FAIL or skip with its reason numbered below.
func compatTable() string {
	compatResults.Lock()
	defer compatResults.Unlock()
	var kubectls, rows []string
	var others []compatResult
	cell := map[[2]string]compatResult{}
	for _, r := range compatResults.cells {
		if !strings.HasPrefix(r.client, "kubectl ") {
			others = append(others, r)
			continue
		}
		if !slices.Contains(kubectls, r.client) {
			kubectls = append(kubectls, r.client)
		}
		if !slices.Contains(rows, r.row) {
			rows = append(rows, r.row)
		}
		cell[[2]string{r.client, r.row}] = r
	}
	var reasons []string
	outcome := func(r compatResult) string {
		if r.outcome != "skip" {
			return r.outcome
		}
		n := slices.Index(reasons, r.reason)
		if n < 0 {
			reasons = append(reasons, r.reason)
			n = len(reasons) - 1
		}
		return fmt.Sprintf("skip [%d]", n+1)
	}
	var b strings.Builder
	if len(kubectls) > 0 {
		b.WriteString("| command | " + strings.Join(kubectls, " | ") + " |\n|---|" + strings.Repeat("---|", len(kubectls)) + "\n")
		for _, row := range rows {
			b.WriteString("| " + row + " |")
			for _, k := range kubectls {
				if r, ok := cell[[2]string{k, row}]; ok {
					b.WriteString(" " + outcome(r) + " |")
				} else {
					b.WriteString(" |")
				}
			}
			b.WriteString("\n")
		}
	}
	if len(others) > 0 {
		b.WriteString("\n| client | check | result |\n|---|---|---|\n")
		for _, r := range others {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", r.client, r.row, outcome(r))
		}
	}
	for i, r := range reasons {
		fmt.Fprintf(&b, "\n[%d] %s\n", i+1, r)
	}
	return b.String()
}

func compatMarkdown(table string) string {
	return `# Client compatibility through Limen

Written by ` + "`make compat`" + ` (test/e2e/compat_test.go, TestCompat): every command runs
through a Limen proxy and worker against the real control plane of test/cluster, with a
kubeconfig written by ` + "`limen kube login`" + ` (server name routing, no path in the server
URL; the rows that say "path kubeconfig" use ` + "`--server-url-style path`" + `, see docs/CLIENTS.md). Cells: pass, FAIL, or skip with the reason below the table. ` + "`make test`" + ` runs the
oldest and the newest kubectl of the machine; ` + "`make compat`" + ` runs all of them.

Last run: ` + time.Now().UTC().Format("2006-01-02 15:04 UTC") + `, Kubernetes v1.37 control plane.

` + table
}
