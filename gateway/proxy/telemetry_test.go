package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/limenhq/limen/gateway/telemetry"
)

// TestMetricLabelsAreBounded: 3,000 unauthenticated requests, each to
// another cluster and with a made-up method, add no label value: the
// cluster of a request is a known one or "unknown", its verb one of a
// fixed set or "other". A request to the known cluster keeps its name.
func TestMetricLabelsAreBounded(t *testing.T) {
	tel, err := telemetry.Start(context.Background(), telemetry.Config{Service: "limen-proxy"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tel.Shutdown(context.Background()) })
	f := newFront(t)
	f.kube.Metrics = tel.Metrics
	f.kube.KnownCluster = func(name string) bool { return name == "demo" }
	for i := range 3000 {
		req, _ := http.NewRequest("FOON", fmt.Sprintf("%s/k8s/c%d/", f.url, i), nil)
		req.Header.Set("X-Test-Anonymous", "1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("request %d: %d, want 401", i, resp.StatusCode)
		}
	}
	if code, body := f.get(t, "/k8s/demo/api", nil); code != http.StatusOK {
		t.Fatalf("known cluster: %d %s", code, body)
	}
	<-f.worker.got
	<-f.worker.grants
	<-f.worker.requests

	rec := httptest.NewRecorder()
	tel.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	allowed := map[string]map[string]bool{
		"limen_cluster": {"demo": true, "unknown": true},
		"k8s_verb": {"get": true, "list": true, "watch": true, "create": true, "update": true, "patch": true, "delete": true,
			"deletecollection": true, "proxy": true, "post": true, "put": true, "head": true, "options": true, "other": true, "unknown": true},
	}
	seen := map[string]map[string]bool{"limen_cluster": {}, "k8s_verb": {}}
	for _, m := range regexp.MustCompile(`(limen_cluster|k8s_verb)="([^"]*)"`).FindAllStringSubmatch(rec.Body.String(), -1) {
		seen[m[1]][m[2]] = true
	}
	for label, values := range seen {
		var bad []string
		for v := range values {
			if !allowed[label][v] {
				bad = append(bad, v)
			}
		}
		if len(bad) > 0 {
			t.Errorf("label %s has %d values from the request (e.g. %q), want only known ones", label, len(bad), bad[:min(3, len(bad))])
		}
	}
	for label, want := range map[string]string{"limen_cluster": "demo", "k8s_verb": "get"} {
		if !seen[label][want] {
			t.Errorf("label %s lacks %q, the known request's (%d values seen)", label, want, len(seen[label]))
		}
	}
	if !seen["limen_cluster"]["unknown"] || !seen["k8s_verb"]["other"] {
		t.Errorf("the unauthenticated requests are not counted as cluster unknown, verb other")
	}
}

// TestClientCannotForceSampling: a client's traceparent with the sampled
// flag does not make the proxy record a trace its ratio would not; when
// the proxy does record, its span is a root of a trace of its own, linked
// to the client's, and the client's trace context goes no further.
func TestClientCannotForceSampling(t *testing.T) {
	const clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientParent := "00-" + clientTrace + "-00f067aa0ba902b7-01"
	for _, ratio := range []float64{0, 1} {
		t.Run(fmt.Sprint("ratio ", ratio), func(t *testing.T) {
			spans := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(telemetry.Sampler(ratio)), sdktrace.WithSpanProcessor(spans))
			t.Cleanup(func() { tp.Shutdown(context.Background()) })
			f := newFront(t)
			f.kube.Tracer = tp.Tracer("test")
			if code, body := f.get(t, "/k8s/demo/api", map[string]string{"traceparent": clientParent, "tracestate": "vendor=x"}); code != http.StatusOK {
				t.Fatalf("%d %s", code, body)
			}
			got := <-f.worker.got
			<-f.worker.grants
			preq := <-f.worker.requests
			if h := got.Header.Get("traceparent") + got.Header.Get("tracestate"); h != "" && regexp.MustCompile(clientTrace+"|vendor").MatchString(h) {
				t.Errorf("the client's trace context reached the worker: %q", h)
			}
			if regexp.MustCompile(clientTrace).MatchString(preq.TraceParent) {
				t.Errorf("the worker is told to continue the client's trace: %s", preq.TraceParent)
			}
			// The request's span ends when the handler returns, just after
			// the response went out.
			var root sdktrace.ReadOnlySpan
			var ended []sdktrace.ReadOnlySpan
			for deadline := time.Now().Add(2 * time.Second); root == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				ended = spans.Ended()
				for _, s := range ended {
					if s.Name() == "limen.proxy.request" {
						root = s
					}
				}
			}
			if ratio == 0 {
				if len(ended) != 0 {
					t.Fatalf("ratio 0 and a client's sampled flag: %d spans recorded, want none", len(ended))
				}
				return
			}
			if root == nil {
				t.Fatalf("no request span among %d", len(ended))
			}
			if root.Parent().IsValid() || root.SpanContext().TraceID().String() == clientTrace {
				t.Errorf("the proxy's span continues the client's trace (parent %v, trace %s)", root.Parent(), root.SpanContext().TraceID())
			}
			links := root.Links()
			if len(links) != 1 || links[0].SpanContext.TraceID().String() != clientTrace {
				t.Errorf("the proxy's span links %v, want the client's span", links)
			}
		})
	}
}
