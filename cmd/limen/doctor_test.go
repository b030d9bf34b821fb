package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/doctor"
)

// doctorLine returns the line of check in a doctor report, failing the
// test unless it has status and says every one of words.
func doctorLine(t *testing.T, out, check string, status doctor.Status, words ...string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.Join(f[1:1+len(strings.Fields(check))], " ") != check {
			continue
		}
		if f[0] != string(status) {
			t.Fatalf("%s: %q, want %s\nreport:\n%s", check, line, status, out)
		}
		for _, w := range words {
			if !strings.Contains(line, w) {
				t.Fatalf("%s: %q does not say %q", check, line, w)
			}
		}
		return line
	}
	t.Fatalf("no %s line in the report:\n%s", check, out)
	return ""
}

// doctor runs limen doctor args and returns its report, requiring it to
// exit non-zero exactly when wantFail is set.
func (h *harness) doctor(wantFail bool, args ...string) string {
	h.t.Helper()
	out, errOut, err := h.run(append([]string{"doctor"}, args...)...)
	if (err != nil) != wantFail {
		h.t.Fatalf("limen doctor %s: %v, want failure %v\nstdout:\n%s\nstderr: %s", strings.Join(args, " "), err, wantFail, out, errOut)
	}
	if wantFail && !strings.Contains(errOut, "checks failed") {
		h.t.Fatalf("limen doctor failed without saying checks failed: %s", errOut)
	}
	return out
}

// TestDoctorUser runs `limen doctor` against a real proxy: before login
// (the proxy's CA is not yet trusted), logged in, with a kubeconfig whose
// plugin resolves and one whose plugin was moved, with a certificate about
// to expire and an expired one, with a proxy CA that is not the proxy's,
// and with this machine's clock five minutes off.
func TestDoctorUser(t *testing.T) {
	h := newHarness(t)
	out := h.doctor(true, "--proxy", h.proxy)
	doctorLine(t, out, "proxy", doctor.Fail, "not trusted", "system's trusted roots", "--ca-fingerprint")
	doctorLine(t, out, "certificate", doctor.Fail, "not logged in", "run limen login --proxy "+h.proxy)
	doctorLine(t, out, "clusters", doctor.Skip)

	h.login("root", adminPassword)
	out = h.doctor(false)
	doctorLine(t, out, "proxy", doctor.OK, h.proxy, "proxy CA stored at login")
	doctorLine(t, out, "clock", doctor.OK)
	doctorLine(t, out, "certificate", doctor.OK, "user:root", "left")
	doctorLine(t, out, "cluster prod", doctor.Warn, "no worker is connected", "limen doctor worker")
	doctorLine(t, out, "cluster staging", doctor.Warn)
	doctorLine(t, out, "kubeconfig", doctor.Warn, "no kubeconfig uses the limen plugin", "limen kube login")

	var js struct {
		Failed int             `json:"failed"`
		Checks []doctor.Result `json:"checks"`
	}
	if err := json.Unmarshal([]byte(h.doctor(false, "--json")), &js); err != nil || js.Failed != 0 || len(js.Checks) != 6 {
		t.Fatalf("--json: %v, %+v", err, js)
	}

	path := h.kubeLogin("prod")
	doctorLine(t, h.doctor(false), "kubeconfig", doctor.OK, path+" user limen-prod", "resolves")
	data, _ := os.ReadFile(path)
	moved := filepath.Join(t.TempDir(), "limen")
	os.WriteFile(path, bytes.ReplaceAll(data, []byte(`"command": "`+limenBin+`"`), []byte(`"command": "`+moved+`"`)), 0o600)
	doctorLine(t, h.doctor(true), "kubeconfig", doctor.Fail, moved+" is missing", "limen kube login")
	os.Remove(path)

	creds, err := h.profile().Credentials(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ttl := h.authority(0).UserCertTTL()
	h.replaceCert(creds.Principal, -(ttl - 10*time.Minute))
	doctorLine(t, h.doctor(false), "certificate", doctor.Warn, "less than 15m0s", "run limen login")
	h.replaceCert(creds.Principal, -(ttl + time.Minute))
	out = h.doctor(true)
	doctorLine(t, out, "certificate", doctor.Fail, "expired at", "run limen login --proxy "+h.proxy)
	doctorLine(t, out, "clusters", doctor.Skip)
	h.replaceCert(creds.Principal, 0)

	// This machine's clock five minutes ahead, against the real proxy's.
	skewed := doctor.User(context.Background(), doctor.UserOptions{Profile: h.profile(),
		Now: func() time.Time { return time.Now().Add(5 * time.Minute) }})
	clock := skewed[1]
	if clock.Check != "clock" || clock.Status != doctor.Fail || !strings.Contains(clock.Found, "behind this machine's") {
		t.Fatalf("clock with a skew of 5 minutes: %+v", clock)
	}

	other, err := ca.Open(ca.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.profile().Dir, "ca.pem"), other.RootPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	out = h.doctor(true)
	doctorLine(t, out, "proxy", doctor.Fail, "not trusted", "not signed by the proxy CA stored at login", "--ca-fingerprint")
	doctorLine(t, out, "clusters", doctor.Skip)
}

// TestDoctorOperator runs `limen doctor proxy` on a real proxy's data
// directory, and `limen doctor worker` beside a real worker enrolled with
// and connected to it; then with the worker's certificate expired (the
// proxy refuses it) and its ServiceAccount token expired. The API server is
// an HTTPS stand-in (see apiServerStandIn).
func TestDoctorOperator(t *testing.T) {
	h := newHarness(t)
	out := h.doctor(false, "proxy", "--data-dir", h.data)
	doctorLine(t, out, "policy", doctor.OK, "bundle revision embedded-")
	doctorLine(t, out, "audit", doctor.OK, "of 10 GiB")
	doctorLine(t, out, "recordings", doctor.OK)
	doctorLine(t, h.doctor(true, "proxy", "--data-dir", filepath.Join(h.data, "nope")), "data dir", doctor.Fail)

	h.login("root", adminPassword)
	token := strings.TrimSpace(h.ok("token", "tokens", "create", "--cluster", "prod"))
	apiServer, caFile := apiServerStandIn(t)
	wdir := t.TempDir()
	tokenFile := filepath.Join(wdir, "sa-token")
	now := time.Now()
	writeJWT(t, tokenFile, now.Add(-time.Minute), now.Add(time.Hour))
	kube := []string{"--data-dir", wdir, "--kube-api-server", apiServer.URL, "--kube-ca-file", caFile, "--kube-token-file", tokenFile}
	w := exec.Command(limenBin, append([]string{"worker", "--proxy", h.proxy, "--kube-cluster", "prod", "--join-token", token}, kube...)...)
	w.Env = h.env()
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Process.Kill(); w.Wait() })
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(h.ok("ls", "kube", "ls"), "prod     connected"); {
		if time.Now().After(deadline) {
			t.Fatalf("the worker did not connect:\n%s", h.ok("ls", "kube", "ls"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	out = h.doctor(false, append([]string{"worker"}, kube...)...)
	doctorLine(t, out, "identity", doctor.OK, "enrolled for cluster prod with "+h.proxy)
	doctorLine(t, out, "tunnel", doctor.OK, "accepts the worker certificate")
	doctorLine(t, out, "clock", doctor.OK)
	doctorLine(t, out, "policy", doctor.OK, "embedded")
	doctorLine(t, out, "spool", doctor.OK, "0 recordings waiting")
	doctorLine(t, out, "token", doctor.OK, "system:serviceaccount:limen:worker")
	doctorLine(t, out, "api server", doctor.OK, "accepts the worker's token")
	doctorLine(t, h.doctor(false), "cluster prod", doctor.OK, "a worker is connected")

	writeJWT(t, tokenFile, now.Add(-2*time.Hour), now.Add(-time.Hour))
	out = h.doctor(true, append([]string{"worker"}, kube...)...)
	doctorLine(t, out, "token", doctor.Fail, "expired at")
	doctorLine(t, out, "api server", doctor.Fail, "refused the worker's token (401)")

	expireWorkerCert(t, h, wdir)
	out = h.doctor(true, append([]string{"worker"}, kube...)...)
	doctorLine(t, out, "identity", doctor.Fail, "expired at", "limen tokens create")
	doctorLine(t, out, "tunnel", doctor.Fail, "refused our certificate", "expired")
}

// apiServerStandIn is an HTTPS stand-in for kube-apiserver's /readyz: it
// accepts only the bearer token writeJWT writes with an exp in the future,
// and answers any other with 401, as the real API server does for an
// expired token. (The cmd/limen tests start no control plane.)
func apiServerStandIn(t *testing.T) (*httptest.Server, string) {
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !strings.Contains(tok, ".") || strings.HasPrefix(tok, "expired.") || r.URL.Path != "/readyz" {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(s.Close)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return s, caFile
}

// writeJWT writes an unsigned ServiceAccount JWT issued at iat, expiring at
// exp; an expired one starts "expired." for the stand-in.
func writeJWT(t *testing.T, path string, iat, exp time.Time) {
	t.Helper()
	claims, _ := json.Marshal(map[string]any{"sub": "system:serviceaccount:limen:worker", "iat": iat.Unix(), "exp": exp.Unix()})
	head := "header"
	if exp.Before(time.Now()) {
		head = "expired"
	}
	tok := head + "." + base64.RawURLEncoding.EncodeToString(claims) + ".signature"
	if err := os.WriteFile(path, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
}

// expireWorkerCert replaces the worker's certificate with one the proxy's
// CA issued for the same key, valid for a second right after the worker
// issuer's start (so the chain still verifies at its start), now expired.
func expireWorkerCert(t *testing.T, h *harness, dataDir string) {
	t.Helper()
	dir := filepath.Join(dataDir, "worker")
	keyPEM, err := os.ReadFile(filepath.Join(dir, "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := ca.ParseKeyPEM(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	start := h.authority(0).WorkerIssuer().NotBefore.Add(time.Minute + time.Second) // ca backdates by a minute
	a, err := ca.Open(ca.Options{DataDir: h.data, Logger: slog.New(slog.DiscardHandler), WorkerCertTTL: time.Second,
		Now: func() time.Time { return start }})
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.IssueWorker(key.Public(), "prod")
	if err != nil {
		t.Fatal(err)
	}
	chain := append(ca.CertPEM(c.Raw), ca.CertPEM(a.WorkerIssuer().Raw)...)
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), chain, 0o600); err != nil {
		t.Fatal(err)
	}
	// The certificate can be no older than its issuer, which was made
	// moments ago: on a fast machine it has not expired yet. The state the
	// test needs is a point on the clock, so wait for that point.
	if d := time.Until(c.NotAfter); d >= 0 {
		time.Sleep(d + 10*time.Millisecond)
	}
}
