package main

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestWorkerRefusesAPlainHTTPAPIServer: `limen worker --kube-api-server
// http://…` refuses to start with an error naming the key, enrolled or not
// (a worker still to enroll keeps its one-time join token), and nothing
// reaches the plain-HTTP listener: the ServiceAccount token is never sent
// in clear. The listener records every connection, whatever it carries.
func TestWorkerRefusesAPlainHTTPAPIServer(t *testing.T) {
	h := newHarness(t)
	h.login("root", adminPassword)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var arrived atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				arrived.Add(1)
			}
		}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("worker-sa-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.crt") // never read: the URL is refused first
	if err := os.WriteFile(caFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	join := strings.TrimSpace(h.ok("create", "tokens", "create", "--cluster", "prod", "--ttl", "1h"))
	worker := func(dir string, extra ...string) []string {
		return append([]string{"worker", "--proxy", h.proxy, "--kube-cluster", "prod", "--data-dir", dir,
			"--kube-api-server", "http://" + ln.Addr().String(), "--kube-token-file", tokenFile, "--kube-ca-file", caFile}, extra...)
	}
	refused := func(name string, args []string) {
		t.Helper()
		done := make(chan string, 1)
		go func() { done <- h.fails(args...) }()
		select {
		case msg := <-done:
			if !strings.Contains(msg, "kube-api-server") || !strings.Contains(msg, "https://") {
				t.Fatalf("%s: limen worker said %q; want the refusal of kube-api-server naming https://", name, msg)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: limen worker with an http:// API server still runs after 30s", name)
		}
	}
	first, second := t.TempDir(), t.TempDir()
	refused("not enrolled", worker(first, "--join-token", join))
	if entries, _ := os.ReadDir(first); len(entries) != 0 {
		t.Fatalf("the refused worker enrolled: %v in its data directory", entries)
	}
	// The refusal came before the join token was spent: another worker
	// enrolls with it.
	if out := h.ok("enroll", worker(second, "--join-token", join, "--enroll-only")...); !strings.Contains(out, "cluster prod enrolled") {
		t.Fatalf("enroll with the token the refused start kept: %q", out)
	}
	refused("enrolled", worker(second))
	if n := arrived.Load(); n != 0 {
		t.Fatalf("the plain-HTTP API server got %d connections from the worker", n)
	}
}
