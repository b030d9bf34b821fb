package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/test/cluster/clustertest"
)

func TestEditorCanReadAndWrite(t *testing.T) {
	ns := clustertest.Namespace(t)
	kc := userKubeconfig(t, "alice")
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"-n", ns, "create", "configmap", "cm1", "--from-literal=k=v1"}, "configmap/cm1 created"},
		{[]string{"-n", ns, "get", "configmap", "cm1", "-o", "jsonpath={.data.k}"}, "v1"},
		{[]string{"-n", ns, "patch", "configmap", "cm1", "-p", `{"data":{"k":"v2"}}`}, "configmap/cm1 patched"},
		{[]string{"-n", ns, "get", "configmaps", "-o", "name"}, "configmap/cm1"},
		{[]string{"-n", ns, "get", "configmap", "cm1", "-o", "jsonpath={.data.k}"}, "v2"},
		{[]string{"-n", ns, "delete", "configmap", "cm1"}, `configmap "cm1" deleted`},
	}
	for _, s := range steps {
		out, stderr, code := kubectl(t, kc, "", s.args...)
		if code != 0 || !strings.Contains(out, s.want) {
			t.Fatalf("kubectl %v: exit %d, stdout %q, stderr %q; want %q", s.args, code, out, stderr, s.want)
		}
	}
}

func TestViewerGetsTheAPIServersOwnForbidden(t *testing.T) {
	ns := clustertest.Namespace(t)
	kc := userKubeconfig(t, "bob")
	if out, stderr, code := kubectl(t, kc, "", "-n", ns, "get", "configmaps"); code != 0 {
		t.Fatalf("bob may list as limen:view: exit %d %q %q", code, out, stderr)
	}
	_, stderr, code := kubectl(t, kc, "", "-n", ns, "create", "configmap", "nope")
	// The API server's RBAC refuses, naming the impersonated user.
	if code == 0 || !strings.Contains(stderr, `User "bob" cannot create resource "configmaps"`) {
		t.Fatalf("create as limen:view: exit %d, stderr %q", code, stderr)
	}
}

func TestWatchStreamsAndEndsOnInterrupt(t *testing.T) {
	ns := clustertest.Namespace(t)
	kc := userKubeconfig(t, "alice")
	cmd := exec.Command(clustertest.Kubectl(t, ""), "--kubeconfig", kc, "-n", ns, "get", "configmaps", "-w", "-o", "name")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	ids := waitOpen(t, "watch", 1)
	for i := range 3 {
		name := fmt.Sprintf("watched-%d", i)
		if _, stderr, code := kubectl(t, kc, "", "-n", ns, "create", "configmap", name); code != 0 {
			t.Fatalf("create: %s", stderr)
		}
		waitLine(t, lines, "configmap/"+name)
	}
	_ = cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("kubectl get -w did not end within 5s of SIGINT")
	}
	// The watch has a session.start and one session.end, which says the
	// user hung up after the three events were relayed.
	st := auditStory(t, ids[0])
	st.check(t, sessions.KindWatch, nil)
	if s := st.start(); s.Namespace != ns || s.Target != ns+"/configmaps" {
		t.Fatalf("session.start %+v, want a watch of %s/configmaps", s, ns)
	}
	if e := st.end(); e.EndReason != audit.EndClientClosed || e.EndHop != audit.HopWorker || e.BytesOut == 0 || e.Duration <= 0 {
		t.Fatalf("session.end %+v, want client_closed seen by the worker, after bytes were relayed", e)
	}
}

func waitLine(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("stream ended before %q", want)
			}
			if strings.Contains(l, want) {
				return
			}
		case <-deadline:
			t.Fatalf("no line with %q within 15s", want)
		}
	}
}

// rawClient speaks to the proxy with alice's certificate, writing request
// lines byte for byte as given.
type rawClient struct {
	addr string
	tls  *tls.Config
}

func newRawClient(t *testing.T, user string) *rawClient {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", userKubeconfig(t, user))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := restTLS(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &rawClient{addr: gateway(t).ProxyAddr, tls: tc}
}

// do sends one request with the raw target and extra header lines and
// returns the status code and body.
func (c *rawClient) do(t *testing.T, target string, headers ...string) (int, string) {
	t.Helper()
	return c.send(t, http.MethodGet, target, "", headers...)
}

// send is do with a method and a body.
func (c *rawClient) send(t *testing.T, method, target, body string, headers ...string) (int, string) {
	t.Helper()
	conn, err := tls.Dial("tcp", c.addr, c.tls)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	req := method + " " + target + " HTTP/1.1\r\nHost: " + c.addr + "\r\nConnection: close\r\n"
	if body != "" {
		req += "Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n"
	}
	for _, h := range headers {
		req += h + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"+body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read response to %s: %v", target, err)
	}
	got, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(got)
}

func TestNonCanonicalPathsAre400(t *testing.T) {
	c := newRawClient(t, "alice")
	if code, body := c.do(t, "/k8s/demo/api/v1/namespaces/default/configmaps"); code != http.StatusOK {
		t.Fatalf("canonical path: %d %s", code, body)
	}
	for _, p := range []string{
		"/k8s/demo/api/v1/namespaces/default/../kube-system/secrets",
		"/k8s/demo/api/v1/./namespaces",
		"/k8s/demo/api/v1//namespaces",
		"/k8s/demo/api/v1/namespaces%2Fkube-system/secrets",
		"/k8s/demo/api/v1/%2e%2e/secrets",
		"/k8s/demo/api/v1/namespaces%5Ckube-system",
		"/k8s/demo/api/v1/namespaces/default./configmaps",
		"/k8s/demo/../demo/api/v1/namespaces",
	} {
		if code, body := c.do(t, p); code != http.StatusBadRequest {
			t.Errorf("%s: status %d (%s), want 400", p, code, strings.TrimSpace(body))
		}
	}
}

func TestForgedIdentityHeadersAreStripped(t *testing.T) {
	c := newRawClient(t, "bob")
	// A SelfSubjectReview returns the identity the API server saw, so the
	// test reads who it thought asked instead of guessing from an error.
	code, body := c.send(t, http.MethodPost, "/k8s/demo/apis/authentication.k8s.io/v1/selfsubjectreviews",
		`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`,
		"Impersonate-User: admin", "impersonate-group: system:masters", "IMPERSONATE-GROUP: limen:edit",
		"Impersonate-Extra-Limen-Session: forged", "Impersonate-Extra-Limenhq.github.io%2fsession: forged", "X-Remote-User: admin", "X-Remote-Group: system:masters",
		"X-Limen-Principal: admin", "Authorization: Bearer forged-token")
	if code != http.StatusCreated {
		t.Fatalf("SelfSubjectReview with forged headers: %d %s", code, body)
	}
	var review authenticationv1.SelfSubjectReview
	if err := json.Unmarshal([]byte(body), &review); err != nil {
		t.Fatalf("decode SelfSubjectReview: %v: %s", err, body)
	}
	u := review.Status.UserInfo
	if u.Username != "bob" {
		t.Fatalf("the API server saw user %q, want bob (forged headers reached it): %+v", u.Username, u)
	}
	for _, g := range u.Groups {
		if g == "system:masters" || g == "limen:edit" {
			t.Fatalf("the API server saw the forged group %q: %+v", g, u)
		}
	}
	key := sessionExtra(gateway(t))
	if s := u.Extra[key]; len(s) != 1 || s[0] == "forged" || len(u.Extra) != 1 {
		t.Fatalf("extra %v, want only the one %s Limen set", u.Extra, key)
	}
}

func TestKilledWorkerFailsCleanlyAndReconnects(t *testing.T) {
	e := gateway(t)
	ns := clustertest.Namespace(t)
	kc := userKubeconfig(t, "alice")
	cmd := exec.Command(clustertest.Kubectl(t, ""), "--kubeconfig", kc, "-n", ns, "get", "configmaps", "-w")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitOpen(t, "watch", 1)
	e.KillWorker()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Log("kubectl watch ended without error after the worker died")
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		t.Fatal("kubectl get -w hung after the worker was killed")
	}
	if _, stderr, code := kubectl(t, kc, "", "-n", ns, "get", "configmaps"); code == 0 || !strings.Contains(stderr, "no Limen worker") {
		t.Errorf("with no worker: exit %d, stderr %q; want the 503 naming the missing worker", code, stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.StartWorker(ctx, ""); err != nil { // the stored identity, no token
		t.Fatal(err)
	}
	if _, stderr, code := kubectl(t, kc, "", "-n", ns, "get", "configmaps"); code != 0 {
		t.Fatalf("after the worker reconnected: %s", stderr)
	}
}

func TestSecondWorkerTakesOverTheCluster(t *testing.T) {
	e := gateway(t)
	kc := userKubeconfig(t, "alice")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kill, err := e.StartExtraWorker(ctx, "worker-b")
	if err != nil {
		t.Fatal(err)
	}
	defer kill()
	for i := range 10 { // spread over both workers
		if _, stderr, code := kubectl(t, kc, "", "get", "configmaps"); code != 0 {
			t.Fatalf("request %d with two workers: %s", i, stderr)
		}
	}
	defer func() {
		if err := e.StartWorker(ctx, ""); err != nil {
			t.Errorf("restart the first worker: %v", err)
		}
	}()
	if err := e.KillWorkerNoticed(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, stderr, code := kubectl(t, kc, "", "get", "configmaps"); code != 0 {
			t.Fatalf("request %d after the first worker died: %s", i, stderr)
		}
	}
}
