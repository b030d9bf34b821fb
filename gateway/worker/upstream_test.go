package worker_test

import (
	"crypto/tls"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/limenhq/limen/gateway/worker"
)

// TestAPIServerOverTLS12: both transports to the API server (plain
// requests and upgrades) work with an API server that speaks only TLS 1.2,
// and neither speaks anything older. The stand-in API server only
// answers; what is under test is the worker's TLS.
func TestAPIServerOverTLS12(t *testing.T) {
	for _, tt := range []struct {
		name string
		max  uint16
		ok   bool
	}{{"TLS 1.2", tls.VersionTLS12, true}, {"TLS 1.1", tls.VersionTLS11, false}} {
		t.Run(tt.name, func(t *testing.T) {
			var got uint16
			api := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = r.TLS.Version
			}))
			api.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
			api.TLS = &tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tt.max}
			api.StartTLS()
			t.Cleanup(api.Close)
			caFile := filepath.Join(t.TempDir(), "ca.crt")
			if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw}), 0o600); err != nil {
				t.Fatal(err)
			}
			_, rt, err := worker.Upstream(api.URL, caFile)
			if err != nil {
				t.Fatal(err)
			}
			upgrades, err := worker.UpgradeTransport(caFile)
			if err != nil {
				t.Fatal(err)
			}
			for name, rt := range map[string]http.RoundTripper{"requests": rt, "upgrades": upgrades} {
				got = 0
				req, _ := http.NewRequest(http.MethodGet, api.URL+"/version", nil)
				resp, err := rt.RoundTrip(req)
				if resp != nil {
					resp.Body.Close()
				}
				switch {
				case tt.ok && (err != nil || got != tls.VersionTLS12):
					t.Errorf("%s: %v, TLS version %#x; want a request over TLS 1.2", name, err, got)
				case !tt.ok && err == nil:
					t.Errorf("%s: a request reached an API server that speaks only %s", name, tt.name)
				}
			}
		})
	}
}
