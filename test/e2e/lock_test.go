package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
)

// lockRuns is how many times each stream kind is locked to measure the
// latency from lock to stream end.
const lockRuns = 20

// admin runs a limen command as the shared proxy's admin.
func admin(t *testing.T, args ...string) string {
	t.Helper()
	return adminOn(t, gateway(t), args...)
}

// adminOn runs a limen command as e's admin and returns its output.
func adminOn(t *testing.T, e *gatewaytest.Env, args ...string) string {
	t.Helper()
	out, err := e.Limen(context.Background(), "admin", "", args...)
	if err != nil {
		t.Fatalf("limen %v: %v", args, err)
	}
	return out
}

// openStream starts a long-lived kubectl command as the user and returns it
// once it runs; done receives its exit.
func openStream(t *testing.T, kubeconfig string, args ...string) (*exec.Cmd, <-chan error) {
	t.Helper()
	return openStreamWith(t, clustertest.Kubectl(t, ""), kubeconfig, args...)
}

// openStreamWith is openStream with a given kubectl binary.
func openStreamWith(t *testing.T, kubectl, kubeconfig string, args ...string) (*exec.Cmd, <-chan error) {
	t.Helper()
	cmd := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	if slices.Contains(args, "-it") { // a terminal, as a person's exec -it has
		tty, err := pty.Start(cmd)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = io.Copy(io.Discard, tty) }()
		t.Cleanup(func() { tty.Close() })
	} else if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, done
}

// waitOpen gives kubectl time to open its stream through both hops: it
// polls `limen sessions ls` until the session is listed live, and returns
// the IDs of the live sessions of that kind.
func waitOpen(t *testing.T, kind string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		var live []string
		for _, i := range listSessions(t, gateway(t)) {
			if i.Live() && string(i.Kind) == kind {
				live = append(live, i.ID)
			}
		}
		if len(live) >= n {
			return live
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no live %s session listed within 15s:\n%s", kind, admin(t, "sessions", "ls"))
	return nil
}

func TestLockEndsOpenStreams(t *testing.T) {
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "talker", []string{"sh", "-c", "while true; do echo tick; sleep 5; done"}, false)
	kc := userKubeconfig(t, "alice")
	web := listenLoopback(t)
	proxied, proxyReady := serveStreamingPod(t, ns)
	raw := newRawClient(t, "alice")
	run := func(args ...string) func() <-chan error {
		return func() <-chan error { _, done := openStream(t, kc, args...); return done }
	}
	kinds := []struct {
		name string
		kind sessions.Kind
		open func() <-chan error
	}{
		{"watch", sessions.KindWatch, run("-n", ns, "get", "configmaps", "-w")},
		{"logs", sessions.KindLogs, run("-n", ns, "logs", "-f", "talker")},
		{"exec", sessions.KindExec, run("-n", ns, "exec", "-it", "talker", "--", "sh")},
		{"attach", sessions.KindAttach, run("-n", ns, "attach", "talker")},
		{"portforward", sessions.KindPortForward, run("-n", ns, "port-forward", "pod/talker", fmt.Sprintf(":%d", web))},
		// Spellings kubectl never sends but the API server accepts: through
		// kubectl get --raw (whose path replaces the kubeconfig's, hence
		// /k8s/demo; it re-encodes the query) and byte for byte.
		{"logs follow=True", sessions.KindLogs, run("get", "--raw", "/k8s/demo/api/v1/namespaces/"+ns+"/pods/talker/log?follow=True")},
		{"watch watch=yes", sessions.KindWatch, run("get", "--raw", "/k8s/demo/api/v1/namespaces/"+ns+"/configmaps?watch=yes")},
		{"logs %66ollow=t", sessions.KindLogs, func() <-chan error {
			return raw.open(t, "/k8s/demo/api/v1/namespaces/"+ns+"/pods/talker/log?%66ollow=t")
		}},
		// A response from a workload, streaming.
		{"pods proxy", sessions.KindProxy, func() <-chan error {
			proxyReady()
			return run("get", "--raw", "/k8s/demo"+proxied)()
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			// A failed run must not leave alice locked for the next kind.
			t.Cleanup(func() { _, _ = gateway(t).Limen(context.Background(), "admin", "", "unlock", "alice") })
			var lat []time.Duration
			for i := range lockRuns {
				done := k.open()
				ids := waitOpen(t, string(k.kind), 1)
				start := time.Now()
				admin(t, "lock", "alice", "--reason", "incident 42")
				select {
				case <-done:
					lat = append(lat, time.Since(start))
				case <-time.After(5 * time.Second):
					t.Fatalf("run %d: %s stream still open 5s after the lock", i, k.name)
				}
				// One session, one story: whichever hop the lock reached
				// first, the one session.end says locked, and why.
				s := auditStory(t, ids[0])
				s.check(t, k.kind, nil)
				if end := s.end(); end.EndReason != audit.EndLocked || !strings.Contains(end.EndDetail, "incident 42") {
					t.Fatalf("run %d: session.end says %q by the %s (%q), want locked with the lock's reason",
						i, end.EndReason, end.EndHop, end.EndDetail)
				}
				_, stderr, code := kubectl(t, kc, "", "-n", ns, "get", "configmaps")
				if code == 0 || !strings.Contains(stderr, "incident 42") {
					t.Fatalf("locked alice: exit %d, stderr %q; want a refusal naming the reason", code, stderr)
				}
				admin(t, "unlock", "alice")
			}
			withinASecond(t, "lock → "+k.name+" end (includes the limen lock process)", lat)
		})
	}
}

// listenLoopback holds a loopback port open for the test (a pod's port on
// the fake node) and returns it.
func listenLoopback(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// serveStreamingPod serves, as the port of a pod, an HTTP response that
// never ends: a line, then silence until the client goes away. It returns
// the pods/proxy path of that response and a function that returns once the
// API server proxies it.
//
// The API server proxies only to a pod address that is not loopback, and
// the fake node gives every pod 127.0.0.1; so the test listens on one of
// this machine's other addresses and writes it into the pod's status
// itself — a stand-in for a node's pod network, named as such. The fake
// kubelet writes a pod's status again only when a container changes state,
// but a report it queued while the pod started may still land after the
// test's, so ready checks the address, and writes it again, before every
// use.
func serveStreamingPod(t *testing.T, ns string) (path string, ready func()) {
	t.Helper()
	ip := proxyableIP(t)
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "tick\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	port := ln.Addr().(*net.TCPAddr).Port
	c := clustertest.Cluster(t)
	clustertest.RunPod(t, ns, "web", []string{"sleep", "3600"}, false)
	hc, err := rest.HTTPClientFor(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	path = fmt.Sprintf("/api/v1/namespaces/%s/pods/web:%d/proxy/stream", ns, port)
	pods := c.Client.CoreV1().Pods(ns)
	ready = func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for {
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				pod, err := pods.Get(ctx, "web", metav1.GetOptions{})
				if err != nil || pod.Status.PodIP == ip {
					return err
				}
				pod.Status.PodIP, pod.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
				_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			line, err := firstLine(ctx, hc, c.Server+path)
			if err == nil && line == "tick" {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("the API server does not proxy %s: %q %v", path, line, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return path, ready
}

// proxyableIP returns an IPv4 address of this machine that the API server
// may proxy to: global unicast, not loopback.
func proxyableIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	t.Fatalf("pods/proxy needs an address of this machine the API server may proxy to (global unicast, not loopback); it has only %v", addrs)
	return ""
}

// firstLine GETs url and returns the first line of a 200 response.
func firstLine(ctx context.Context, hc *http.Client, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if resp.StatusCode != http.StatusOK {
		return line, fmt.Errorf("%s", resp.Status)
	}
	return strings.TrimSuffix(line, "\n"), err
}

// open sends one GET with the raw target and returns once the response
// head is in; done receives when the body ends.
func (c *rawClient) open(t *testing.T, target string) <-chan error {
	t.Helper()
	conn, err := tls.Dial("tcp", c.addr, c.tls)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, "GET "+target+" HTTP/1.1\r\nHost: "+c.addr+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read response to %s: %v", target, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %s %s", target, resp.Status, b)
	}
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		done <- err
	}()
	return done
}

func TestLocksSurviveProxyRestartAndAreAudited(t *testing.T) {
	e := gateway(t)
	kc := userKubeconfig(t, "bob")
	admin(t, "lock", "bob", "--reason", "survives restarts")
	t.Cleanup(func() { _, _ = e.Limen(context.Background(), "admin", "", "unlock", "bob") })
	e.StopProxy()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.StartProxy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.WaitWorker(ctx, true); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := kubectl(t, kc, "", "get", "configmaps")
	if code == 0 || !strings.Contains(stderr, "survives restarts") {
		t.Fatalf("after a proxy restart bob: exit %d, stderr %q; want the lock's reason", code, stderr)
	}
	admin(t, "unlock", "bob")
	if _, stderr, code := kubectl(t, kc, "", "get", "configmaps"); code != 0 {
		t.Fatalf("unlocked bob: %s", stderr)
	}
	out, err := e.Limen(ctx, "", "", "audit", "search", "--data-dir", filepath.Join(e.Dir, "proxy"), "--user", "admin", "--json")
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{`"user.lock"`, `"user.unlock"`} {
		if !strings.Contains(out, typ) {
			t.Errorf("audit has no %s event by admin:\n%s", typ, out)
		}
	}
}
