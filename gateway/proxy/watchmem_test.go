package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limenhq/limen/bench"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/proxy"
)

// TestFiguresIdleWatchMemory measures what an idle watch costs the proxy and
// the worker together (issue #33): N watches of an API server stand-in
// (named as such: it sends a watch's head, as kube-apiserver does, and then
// nothing) opened straight to it, then through a real proxy and a real
// worker joined by a real tunnel, all in this process, each over HTTP/2 as
// kubectl and the worker speak it. What the Limen watches add beyond the
// direct ones is the two hops' cost: the Go runtime's HeapInuse and
// StackInuse, and the goroutines, counted for each hop by the pprof label
// its goroutines carry. Figures only, logged: it sets no threshold, and
// runs only with LIMEN_FIGURES=1. LIMEN_WATCHES sets N (default 1000);
// LIMEN_WATCH_PROFILES names a directory for the heap and goroutine
// profiles before and with the Limen watches (go tool pprof -diff_base).
func TestFiguresIdleWatchMemory(t *testing.T) {
	if os.Getenv("LIMEN_FIGURES") == "" {
		t.Skip("figures only: run with LIMEN_FIGURES=1")
	}
	n := 1000
	if s := os.Getenv("LIMEN_WATCHES"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			t.Fatalf("LIMEN_WATCHES=%q: want a positive number", s)
		}
		n = v
	}
	profiles := os.Getenv("LIMEN_WATCH_PROFILES")
	runtime.MemProfileRate = 4 << 10
	api := watchStandIn(t)
	caFile := filepath.Join(t.TempDir(), "api-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	var r *running
	pprof.Do(context.Background(), pprof.Labels("side", "proxy"), func(context.Context) {
		r = startProxy(t, proxy.Config{})
	})
	pprof.Do(context.Background(), pprof.Labels("side", "worker"), func(context.Context) {
		startWorker(t, r, api.URL, caFile)
	})
	admin := identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "root", Traits: map[string][]string{"groups": {"admins"}}}
	const target = "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=1800"

	roots := x509.NewCertPool()
	roots.AddCert(api.Certificate())
	direct := httpClient(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}, true)
	direct.Timeout = 0
	limen := httpClient(r.tlsConfig(t, &admin, time.Hour), true)
	limen.Timeout = 0

	ctx := context.Background()
	// One watch each way first: the connections, pools and caches every
	// watch shares are then counted in neither.
	for _, c := range []struct {
		hc  *http.Client
		url string
	}{{direct, api.URL + target}, {limen, "https://" + r.addr + "/k8s/" + testCluster + target}} {
		w, err := bench.OpenWatches(ctx, c.hc, c.url, 1)
		if err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
	measure := func(name string, hc *http.Client, url string) memFigures {
		before := snapMemory(t, profiles, name+"-before")
		w, err := bench.OpenWatches(ctx, hc, url, n)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // idle: let what opening them left settle
		after := snapMemory(t, profiles, name+"-after")
		if name == "limen" && os.Getenv("LIMEN_WATCH_QUIT") != "" {
			// GOTRACEBACK=system: every goroutine's frames with their sp, to
			// read how deep each parked watch's stack is.
			_ = syscall.Kill(os.Getpid(), syscall.SIGQUIT)
			time.Sleep(time.Minute)
		}
		w.Close()
		hc.CloseIdleConnections()
		waitUntil(t, "the watches to close", func() bool { return runtime.NumGoroutine() <= before.goroutines+n/10 })
		return after.minus(before)
	}
	d := measure("direct", direct, api.URL+target)
	l := measure("limen", limen, "https://"+r.addr+"/k8s/"+testCluster+target)
	load, _ := os.ReadFile("/proc/loadavg")
	per := func(b int64) string { return fmt.Sprintf("%.1f KiB", float64(b)/float64(n)/1024) }
	t.Logf("%d idle watches, load %s", n, strings.TrimSpace(string(load)))
	t.Logf("direct (client + API server): heap %s, stack %s, goroutines %.2f per watch", per(d.heap), per(d.stack), float64(d.goroutines)/float64(n))
	t.Logf("limen (client + proxy + worker + API server): heap %s, stack %s, goroutines %.2f per watch (proxy %.2f, worker %.2f)",
		per(l.heap), per(l.stack), float64(l.goroutines)/float64(n), float64(l.side["proxy"])/float64(n), float64(l.side["worker"])/float64(n))
	t.Logf("proxy + worker (limen - direct): heap %s + stack %s = %s per watch",
		per(l.heap-d.heap), per(l.stack-d.stack), per(l.heap-d.heap+l.stack-d.stack))
}

// watchStandIn is the API server stand-in of TestFiguresIdleWatchMemory,
// over HTTP/2: a watch gets kube-apiserver's headers, flushed, and then
// nothing until its client leaves.
func watchStandIn(t *testing.T) *httptest.Server {
	api := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Audit-Id", "5c8e2b1e-7e6f-4d3c-9f4a-2b1c0d9e8f7a")
		h.Set("Cache-Control", "no-cache, private")
		h.Set("Content-Type", "application/json")
		h.Set("X-Kubernetes-Pf-Flowschema-Uid", "0c4e8f6a-1b2d-4e3f-8a9b-7c6d5e4f3a2b")
		h.Set("X-Kubernetes-Pf-Prioritylevel-Uid", "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	api.EnableHTTP2 = true
	api.StartTLS()
	t.Cleanup(api.Close)
	return api
}

// memFigures is what the Go runtime holds at one moment, or a difference.
type memFigures struct {
	heap, stack int64
	goroutines  int
	side        map[string]int // goroutines by their pprof label "side"
}

func (a memFigures) minus(b memFigures) memFigures {
	d := memFigures{heap: a.heap - b.heap, stack: a.stack - b.stack, goroutines: a.goroutines - b.goroutines, side: map[string]int{}}
	for k, v := range a.side {
		d.side[k] = v - b.side[k]
	}
	return d
}

// snapMemory collects the garbage, returns the runtime's figures, and
// writes the heap and goroutine profiles into dir when dir is set.
func snapMemory(t *testing.T, dir, name string) memFigures {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory() // a second collection, and the stacks shrunk at it
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := memFigures{heap: int64(ms.HeapInuse), stack: int64(ms.StackInuse), goroutines: runtime.NumGoroutine(), side: map[string]int{}}
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	// debug=1: "N @ pc…", then "# labels: {"side":"proxy"}" for a labelled record.
	var count int
	sc := bufio.NewScanner(&b)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, " @ "); i > 0 {
			count, _ = strconv.Atoi(line[:i])
			continue
		}
		if rest, ok := strings.CutPrefix(line, `# labels: {"side":"`); ok {
			side, _, _ := strings.Cut(rest, `"`)
			m.side[side] += count
		}
	}
	if dir != "" {
		for _, p := range []string{"heap", "goroutine"} {
			f, err := os.Create(filepath.Join(dir, name+"."+p+".pb.gz"))
			if err != nil {
				t.Fatal(err)
			}
			if err := pprof.Lookup(p).WriteTo(f, 0); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	return m
}
