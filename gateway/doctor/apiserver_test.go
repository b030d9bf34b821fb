package doctor

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// jwt is an unsigned token with the given claims: the check reads claims
// without verifying, and the API server stand-in compares strings.
func jwt(t *testing.T, claims map[string]any) string {
	t.Helper()
	b, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc(b) + "." + enc([]byte("signature"))
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestToken: the exp claim of the ServiceAccount token decides: expired
// fails, less than a fifth of its life left (the kubelet replaces it at
// 80%) warns, no expiry is fine; a missing file fails (the worker answers
// 503) and a token that is no JWT warns.
func TestToken(t *testing.T) {
	dir := t.TempDir()
	now := time.Now().Truncate(time.Second) // as exp and iat are
	sub := "system:serviceaccount:limen:worker"
	tests := []struct {
		name    string
		content string // "" : no file
		status  Status
		words   []string
	}{
		{name: "fresh", content: jwt(t, map[string]any{"sub": sub, "iat": now.Add(-10 * time.Minute).Unix(), "exp": now.Add(50 * time.Minute).Unix()}),
			status: OK, words: []string{sub, "50m0s left"}},
		{name: "late", content: jwt(t, map[string]any{"sub": sub, "iat": now.Add(-55 * time.Minute).Unix(), "exp": now.Add(5 * time.Minute).Unix()}),
			status: Warn, words: []string{"5m0s left", "should have been replaced"}},
		{name: "short without iat", content: jwt(t, map[string]any{"exp": now.Add(5 * time.Minute).Unix()}), status: Warn, words: []string{"5m0s left"}},
		{name: "expired", content: jwt(t, map[string]any{"sub": sub, "exp": now.Add(-time.Minute).Unix()}), status: Fail, words: []string{"expired at"}},
		{name: "no expiry", content: jwt(t, map[string]any{"sub": sub}), status: OK, words: []string{"no expiry"}},
		{name: "not a JWT", content: "opaque-token", status: Warn, words: []string{"no readable JWT"}},
		{name: "missing", status: Fail, words: []string{"no such file", "503"}},
		{name: "empty", content: "\n", status: Fail, words: []string{"empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "absent")
			if tt.content != "" {
				path = writeFile(t, dir, tt.name, tt.content)
			}
			_, r := Token(path, now)
			wantResult(t, r, tt.status, tt.words...)
		})
	}
}

// TestAPIServer runs the API server check against an HTTPS stand-in that
// answers /readyz as kube-apiserver does: 401 for a token it does not
// accept, 500 when not ready. (A stand-in: the cmd/limen tests start no
// control plane, and a real one takes long to start. The real API server's
// 401 and readyz are what the stand-in copies.) Unreachable, untrusted and
// http:// API servers fail as well.
func TestAPIServer(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	cert := ca.issue(t, []string{"127.0.0.1"}, time.Now().Add(time.Hour), false)
	dir := t.TempDir()
	caFile := writeFile(t, dir, "ca.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})))
	otherCA := writeFile(t, dir, "other.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: other.cert.Raw})))
	const good = "good-token"
	ready := true
	apiServer := tlsServer(t, cert, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Authorization") != "" && r.Header.Get("Authorization") != "Bearer "+good:
			http.Error(w, `{"kind":"Status","status":"Failure","message":"Unauthorized","code":401}`, http.StatusUnauthorized)
		case r.URL.Path != "/readyz":
			http.NotFound(w, r)
		case !ready:
			http.Error(w, "[-]etcd failed: reason withheld\nreadyz check failed", http.StatusInternalServerError)
		default:
			fmt.Fprint(w, "ok")
		}
	}))
	tests := []struct {
		name, server, ca, token string
		notReady                bool
		status                  Status
		words                   []string
	}{
		{name: "ready, token accepted", server: apiServer.URL, ca: caFile, token: good, status: OK, words: []string{"accepts the worker's token"}},
		{name: "token refused", server: apiServer.URL, ca: caFile, token: "expired-token", status: Fail, words: []string{"refused the worker's token (401)"}},
		{name: "no token", server: apiServer.URL, ca: caFile, status: Warn, words: []string{"not tried"}},
		{name: "not ready", server: apiServer.URL, ca: caFile, token: good, notReady: true, status: Fail, words: []string{"not ready (500)", "etcd failed"}},
		{name: "untrusted", server: apiServer.URL, ca: otherCA, token: good, status: Fail, words: []string{"not trusted", "--kube-ca-file " + otherCA}},
		{name: "unreachable", server: "https://" + closedAddr(t), ca: caFile, token: good, status: Fail, words: []string{"unreachable"}},
		{name: "http", server: "http://" + hostPort(apiServer), ca: caFile, token: good, status: Fail, words: []string{"https://"}},
		{name: "CA file missing", server: apiServer.URL, ca: filepath.Join(dir, "none"), token: good, status: Fail, words: []string{"kube-ca-file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ready = !tt.notReady
			wantResult(t, APIServer(context.Background(), tt.server, tt.ca, tt.token, DefaultTimeout, time.Now), tt.status, tt.words...)
		})
	}
}
