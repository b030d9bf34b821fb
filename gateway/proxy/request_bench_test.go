package proxy_test

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/proxy"
)

// BenchmarkRequestPath is the CPU and the allocations of one request through
// a real proxy and a real worker (proxy.New, worker.New, the tunnel, the
// audit store) to a stand-in API server (named as such: an httptest HTTP/2
// server answering a fixed ConfigMap or a list of 500), against the same
// client and stand-in without Limen ("direct"). cpu-µs/op is the whole
// process's (getrusage), so Limen's own cost is limen minus direct. The
// proxy's goroutines carry the pprof label side=proxy, the worker's
// side=worker and the stand-in's side=api, so that a CPU profile splits the
// hops:
//
//	go test -run '^$' -bench 'RequestPath/GET/limen' -benchtime 3000x -cpuprofile cpu.out ./gateway/proxy/
//	go tool pprof -top -tagfocus side=proxy cpu.out
//
// The c=64 cells run the requests from 64 goroutines at once.
func BenchmarkRequestPath(b *testing.B) {
	const listSize = 500
	one := configMapJSON("one")
	var list strings.Builder
	list.WriteString(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"1000"},"items":[`)
	for i := range listSize {
		if i > 0 {
			list.WriteByte(',')
		}
		list.WriteString(configMapJSON(fmt.Sprintf("cm-%03d", i)))
	}
	list.WriteString("]}")
	listBody := []byte(list.String())

	labels := func(side string) {
		pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("side", side)))
	}
	defer labels("client")
	labels("api")
	api := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Audit-Id", "7f3c9d2e-1b4a-4c8e-9f00-123456789abc")
		w.Header().Set("Cache-Control", "no-cache, private")
		w.Header().Set("X-Kubernetes-Pf-Flowschema-Uid", "0b7f2c34-5e6d-4f70-8a91-b2c3d4e5f607")
		w.Header().Set("X-Kubernetes-Pf-Prioritylevel-Uid", "1c8a3d45-6f7e-4a81-9ba2-c3d4e5f60718")
		if strings.HasSuffix(r.URL.Path, "/one") {
			_, _ = io.WriteString(w, one)
			return
		}
		// The API server writes a large list in pieces, without a length.
		for rest := listBody; len(rest) > 0; {
			n := min(len(rest), 32<<10)
			_, _ = w.Write(rest[:n])
			rest = rest[n:]
		}
	}))
	api.EnableHTTP2 = true
	api.StartTLS()
	defer api.Close()
	caFile := filepath.Join(b.TempDir(), "api-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw}), 0o600); err != nil {
		b.Fatal(err)
	}
	labels("proxy")
	r := startProxy(b, proxy.Config{})
	labels("worker")
	startWorker(b, r, api.URL, caFile)
	labels("client")

	root := identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "root", Traits: map[string][]string{"groups": {"admins"}}}
	limen := httpClient(r.tlsConfig(b, &root, time.Hour), true)
	direct := api.Client()
	const ns = "/api/v1/namespaces/bench-get/configmaps"
	for _, cell := range []struct {
		name string
		path string
		conc int
	}{
		{"GET", ns + "/one", 1},
		{"GET-c64", ns + "/one", 64},
		{"LIST", ns, 1},
		{"LIST-c16", ns, 16},
	} {
		for _, t := range []struct {
			name   string
			client *http.Client
			base   string
		}{
			{"direct", direct, api.URL},
			{"limen", limen, "https://" + r.addr + "/k8s/" + testCluster},
		} {
			url := t.base + cell.path
			get := func() error {
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Header.Set("Accept", "application/json, */*")
				req.Header.Set("User-Agent", "limen-bench/v0.0.0 (linux/amd64) kubernetes/$Format")
				resp, err := t.client.Do(req)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					return err
				}
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("GET %s: %s", url, resp.Status)
				}
				return nil
			}
			b.Run(cell.name+"/"+t.name, func(b *testing.B) {
				for range 20 { // warm: connections, the grant, the policy's cache
					if err := get(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				before := cpuTime()
				if cell.conc == 1 {
					for b.Loop() {
						if err := get(); err != nil {
							b.Fatal(err)
						}
					}
				} else {
					b.SetParallelism(max(1, cell.conc/runtime.GOMAXPROCS(0)))
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if err := get(); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				b.StopTimer()
				b.ReportMetric(float64((cpuTime()-before).Microseconds())/float64(b.N), "cpu-µs/op")
			})
		}
	}
}

// cpuTime is the CPU the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// configMapJSON is a ConfigMap as the API server answers it: about 256
// bytes of data, its metadata and managed fields.
func configMapJSON(name string) string {
	return `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"` + name + `","namespace":"bench-get",` +
		`"uid":"5e0c3f0e-7d43-4a51-9b3c-2f1d0a9e8b7c","resourceVersion":"1234","creationTimestamp":"2026-12-02T19:20:12Z",` +
		`"labels":{"app":"limen-bench"},"managedFields":[{"manager":"limen-bench","operation":"Update","apiVersion":"v1",` +
		`"time":"2026-12-02T19:20:12Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:payload":{}},` +
		`"f:metadata":{"f:labels":{".":{},"f:app":{}}}}}]},"data":{"payload":"` + strings.Repeat("x", 256) + `"}}`
}
