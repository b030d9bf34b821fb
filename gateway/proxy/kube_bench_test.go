package proxy_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/telemetry"
)

type discardSink struct{}

func (discardSink) Emit(context.Context, audit.Event) error { return nil }

// BenchmarkKubeRefusedWithMetrics is the proxy's cost of a request it
// refuses before authentication, with metrics on: the request span, the
// observer and the latency histogram, which every request pays.
func BenchmarkKubeRefusedWithMetrics(b *testing.B) {
	tel, err := telemetry.Start(context.Background(), telemetry.Config{Service: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	k := &proxy.Kube{
		Authenticate: func(*http.Request) (identity.Principal, time.Time, error) {
			return identity.Principal{}, time.Time{}, errors.New("no client certificate")
		},
		Audit: discardSink{}, Metrics: tel.Metrics, Logger: slog.New(slog.DiscardHandler), Now: time.Now,
	}
	known := map[string]bool{"demo": true}
	k.KnownCluster = func(name string) bool { return known[name] }
	req := httptest.NewRequest(http.MethodGet, "/k8s/demo/api", nil)
	b.ReportAllocs()
	for b.Loop() {
		k.ServeHTTP(httptest.NewRecorder(), req)
	}
}
