package clustertest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/limenhq/limen/test/cluster/clustertest"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// kubectl runs one kubectl command against the admin kubeconfig.
func kubectl(t *testing.T, bin string, stdin string, args ...string) (string, string, int) {
	t.Helper()
	c := clustertest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
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

// versions are the kubectl releases the streaming tests use: the oldest
// SPDY-only one and the newest.
func versions(t *testing.T) []string {
	var out []string
	all := clustertest.Versioned()
	for _, v := range all {
		if v.Minor == "1.29" {
			out = append(out, v.Minor)
		}
	}
	if len(all) > 0 && all[len(all)-1].Minor != "1.29" {
		out = append(out, all[len(all)-1].Minor)
	}
	if len(out) == 0 {
		out = append(out, "1.37") // the harness-built kubectl
	}
	return out
}

func TestExecStdinAndExitCode(t *testing.T) {
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "shell", []string{"sleep", "infinity"}, false)
	for _, v := range versions(t) {
		t.Run("kubectl-"+v, func(t *testing.T) {
			bin := clustertest.Kubectl(t, v)
			out, stderr, code := kubectl(t, bin, "hello through stdin\n", "-n", ns, "exec", "-i", "shell", "--", "cat")
			if code != 0 || out != "hello through stdin\n" {
				t.Fatalf("exec -i cat: code %d, stdout %q, stderr %q", code, out, stderr)
			}
			_, stderr, code = kubectl(t, bin, "", "-n", ns, "exec", "shell", "--", "sh", "-c", "echo to-stderr >&2; exit 7")
			if code != 7 || !strings.Contains(stderr, "to-stderr") {
				t.Fatalf("exec exit 7: code %d, stderr %q", code, stderr)
			}
		})
	}
	logTransports(t)
}

func TestExecTTYWithResize(t *testing.T) {
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "shell", []string{"sleep", "infinity"}, false)
	c := clustertest.Cluster(t)
	for _, v := range versions(t) {
		t.Run("kubectl-"+v, func(t *testing.T) {
			bin := clustertest.Kubectl(t, v)
			cmd := exec.Command(bin, "--kubeconfig", c.Kubeconfig, "-n", ns, "exec", "-it", "shell", "--", "sh")
			ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 100, Rows: 30})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); ptmx.Close() }()
			screen := clustertest.NewScreen(ptmx)
			send := func(s string) { _, _ = io.WriteString(ptmx, s) }
			send("tty\n")
			screen.WaitFor(t, "/dev/pts/")
			// The initial size and each resize travel on their own stream and
			// may arrive after the shell starts: ask until they show.
			screen.Retype(t, send, "stty size", "30 100")
			if err := pty.Setsize(ptmx, &pty.Winsize{Cols: 132, Rows: 43}); err != nil {
				t.Fatal(err)
			}
			screen.Retype(t, send, "stty size", "43 132")
			send("exit 3\n")
			err = cmd.Wait()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
				t.Fatalf("exec -it exit: %v, want exit code 3", err)
			}
		})
	}
}

func TestAttachAndLogsFollow(t *testing.T) {
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "talker", []string{"sh", "-c", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.1; done"}, false)
	c := clustertest.Cluster(t)
	bin := clustertest.Kubectl(t, "")
	for _, args := range [][]string{{"attach", "talker"}, {"logs", "-f", "talker"}} {
		t.Run(args[0], func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"--kubeconfig", c.Kubeconfig, "-n", ns}, args...)...)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			// Two successive ticks prove the output streams rather than
			// arriving at once at the end.
			screen := clustertest.NewScreen(stdout)
			first := screen.WaitForLine(t, "tick ")
			n, _ := strconv.Atoi(strings.TrimPrefix(first, "tick "))
			screen.WaitFor(t, fmt.Sprintf("tick %d", n+3))
		})
	}
}

func TestPortForward(t *testing.T) {
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "web", []string{"sleep", "infinity"}, false)
	c := clustertest.Cluster(t)
	// Pods share the host's network on the fake node: a server here is the
	// pod's port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "served from the pod "+r.URL.Path)
	})}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	podPort := l.Addr().(*net.TCPAddr).Port
	for _, v := range versions(t) {
		t.Run("kubectl-"+v, func(t *testing.T) {
			bin := clustertest.Kubectl(t, v)
			cmd := exec.Command(bin, "--kubeconfig", c.Kubeconfig, "-n", ns, "port-forward", "pod/web", fmt.Sprintf(":%d", podPort))
			stdout, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			line := clustertest.NewScreen(stdout).WaitForLine(t, "Forwarding from 127.0.0.1:")
			local := strings.Fields(strings.TrimPrefix(line, "Forwarding from "))[0]
			for i := range 3 {
				resp, err := http.Get(fmt.Sprintf("http://%s/req%d", local, i))
				if err != nil {
					t.Fatalf("GET through port-forward: %v", err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if want := fmt.Sprintf("served from the pod /req%d", i); string(body) != want {
					t.Fatalf("body %q, want %q", body, want)
				}
			}
		})
	}
	logTransports(t)
}

func TestImpersonationWhoami(t *testing.T) {
	bin := clustertest.Kubectl(t, "")
	out, stderr, code := kubectl(t, bin, "", "auth", "whoami", "--as=alice", "--as-group=limen:view", "-o", "json")
	if code != 0 {
		t.Fatalf("auth whoami: code %d: %s", code, stderr)
	}
	var review struct {
		Status struct {
			UserInfo struct {
				Username string   `json:"username"`
				Groups   []string `json:"groups"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &review); err != nil {
		t.Fatalf("decode whoami %q: %v", out, err)
	}
	u := review.Status.UserInfo
	if u.Username != "alice" || !slices.Contains(u.Groups, "limen:view") {
		t.Fatalf("whoami = %+v, want alice in limen:view", u)
	}
}

func TestServerVersionIsPinned(t *testing.T) {
	c := clustertest.Cluster(t)
	v, err := c.Client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != "v1.37.2" {
		t.Fatalf("server reports %s, want v1.37.2", v.GitVersion)
	}
}

func logTransports(t *testing.T) {
	t.Logf("transports seen at the fake kubelet: %v", clustertest.Cluster(t).Kubelet.Seen())
}
