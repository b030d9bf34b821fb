package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"crypto/tls"

	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/profile"
)

// kubeLogin runs `limen kube login cluster` and returns the kubeconfig path.
func (h *harness) kubeLogin(cluster string) string {
	h.t.Helper()
	out := h.ok("kube login", "kube", "login", cluster)
	path, ok := strings.CutPrefix(strings.TrimSpace(out), "export KUBECONFIG=")
	if !ok {
		h.t.Fatalf("kube login printed %q, want an export line", out)
	}
	return path
}

func TestKubeCommands(t *testing.T) {
	h := newHarness(t)
	if msg := h.fails("kube", "credentials"); !strings.Contains(msg, "run limen login") {
		t.Fatalf("plugin before login: %q", msg)
	}
	h.login("root", adminPassword)
	ls := h.ok("kube ls", "kube", "ls")
	if !strings.Contains(ls, "prod") || !strings.Contains(ls, "staging") || !strings.Contains(ls, "not connected") {
		t.Fatalf("kube ls: %q", ls)
	}
	path := h.kubeLogin("prod")
	if filepath.Dir(path) != h.profile().Dir {
		t.Fatalf("kubeconfig %s is not in the profile directory", path)
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cl := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
	host, _, _ := net.SplitHostPort(h.proxy)
	if cl.Server != "https://"+h.proxy || cl.TLSServerName != "prod.kube."+host || len(cl.CertificateAuthorityData) == 0 {
		t.Fatalf("cluster %+v", cl)
	}
	ai := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
	if ai.Exec == nil || ai.Exec.APIVersion != "client.authentication.k8s.io/v1" ||
		ai.Exec.InteractiveMode != clientcmdapi.NeverExecInteractiveMode || ai.Exec.Command == "" ||
		strings.Join(ai.Exec.Args, " ") != "kube credentials --proxy "+h.proxy {
		t.Fatalf("exec config %+v", ai.Exec)
	}
	if ai.Token != "" || ai.ClientCertificateData != nil || ai.ClientKeyData != nil || ai.Username != "" || ai.AuthProvider != nil {
		t.Fatalf("kubeconfig carries a credential besides the plugin: %+v", ai)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig mode %v", fi.Mode())
	}

	var ec clientauthv1.ExecCredential
	if err := json.Unmarshal([]byte(h.ok("plugin", "kube", "credentials")), &ec); err != nil {
		t.Fatal(err)
	}
	creds, err := h.profile().Credentials(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if ec.APIVersion != "client.authentication.k8s.io/v1" || ec.Kind != "ExecCredential" || ec.Status == nil ||
		ec.Status.ClientCertificateData != string(creds.CertPEM) || ec.Status.ClientKeyData != string(creds.KeyPEM) ||
		ec.Status.ExpirationTimestamp == nil || !ec.Status.ExpirationTimestamp.Time.Equal(creds.Cert.NotAfter.Truncate(time.Second)) {
		t.Fatalf("ExecCredential %+v", ec)
	}

	if _, errOut, err := h.run("kube", "login", "nowhere"); err != nil || !strings.Contains(errOut, "policy does not list cluster nowhere") {
		t.Fatalf("kube login for an unlisted cluster: %v, %q", err, errOut)
	}
	for _, bad := range []string{"../etc", "Prod", "a/b", ""} {
		h.fails("kube", "login", bad)
	}
}

// TestKubeLoginServerURLStyle: --server-url-style path writes its own
// kubeconfig with the cluster in the server URL's path and leaves the
// default one alone; a style the proxy's address cannot have, or no style,
// is refused naming the flag.
func TestKubeLoginServerURLStyle(t *testing.T) {
	h := newHarness(t)
	h.login("root", adminPassword)
	def := h.kubeLogin("prod")
	out := h.ok("kube login path", "kube", "login", "prod", "--server-url-style", "path")
	path, ok := strings.CutPrefix(strings.TrimSpace(out), "export KUBECONFIG=")
	if !ok || path == def || filepath.Base(path) != "kubeconfig-prod.path.json" {
		t.Fatalf("kube login --server-url-style path printed %q (default kubeconfig %s)", out, def)
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cl := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
	if cl.Server != "https://"+h.proxy+"/k8s/prod" || cl.TLSServerName != "" {
		t.Fatalf("path style: cluster %+v", cl)
	}
	if cfg, err := clientcmd.LoadFromFile(def); err != nil || cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster].TLSServerName == "" {
		t.Fatalf("the default kubeconfig changed: %v", err)
	}
	for _, tt := range []struct{ style, want string }{
		{"", `--server-url-style: "" is not a server URL style: want server-name`},
		{"DNS", `--server-url-style: "DNS" is not a server URL style`},
		{"path/../dns", `is not a server URL style`},
		// The harness's proxy is 127.0.0.1:PORT.
		{"dns", "--server-url-style dns: proxy address"},
	} {
		if msg := h.fails("kube", "login", "prod", "--server-url-style", tt.style); !strings.Contains(msg, tt.want) {
			t.Errorf("--server-url-style %q: %q, want %q", tt.style, msg, tt.want)
		}
	}
}

func findKubectl(t *testing.T) string {
	if p := os.Getenv("KUBECTL"); p != "" {
		return p
	}
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p
	}
	if p := "/usr/lib/google-cloud-sdk/bin/kubectl.1.33"; fileExists(p) {
		return p
	}
	t.Fatal("kubectl not found: the kubectl plugin test needs a real kubectl; put it on PATH or set KUBECTL")
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// fakeAPIServer is an HTTPS endpoint with the proxy's serving certificate
// that requires a client certificate from the proxy's CA and reports the
// principal it carries, standing in for the proxy's routes by server name.
func fakeAPIServer(t *testing.T, a *ca.Authority) *httptest.Server {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := a.PrincipalFromRequest(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		// The kubeconfig names the cluster by server name alone, and the
		// proxy's certificate covers that name.
		if r.URL.Path != "/version" || !strings.HasPrefix(r.TLS.ServerName, "prod.kube.") {
			t.Logf("stand-in API server: %s %s (server name %q)", r.Method, r.URL.Path, r.TLS.ServerName)
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"major":"1","minor":"33","gitVersion":"v1.33.0","platform":"limen-test %s %s"}`, p.String(), p.LoginID)
	}))
	cfg := a.ServerTLSConfig()
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	srv.TLS = cfg
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func TestKubectlThroughPlugin(t *testing.T) {
	kubectl := findKubectl(t)
	h := newHarness(t)
	h.login("root", adminPassword)
	path := h.kubeLogin("prod")
	srv := fakeAPIServer(t, h.authority(0))
	// The proxy's routes are not part of this package: point the
	// written kubeconfig at the stand-in, which trusts the same CA.
	data, _ := os.ReadFile(path)
	data = bytes.ReplaceAll(data, []byte(`"https://`+h.proxy+`"`), []byte(`"`+srv.URL+`"`))
	os.WriteFile(path, data, 0o600)

	kube := func() (string, string, error) {
		cmd := exec.Command(kubectl, "--kubeconfig", path, "version", "-o", "json")
		cmd.Env = append(h.env(), "KUBECONFIG="+path)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		return o.String(), e.String(), err
	}
	creds, err := h.profile().Credentials(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, err := kube()
	if err != nil || !strings.Contains(out, "limen-test user:root "+creds.Principal.LoginID) {
		t.Fatalf("kubectl through the plugin: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}

	root := identity.Principal{Kind: identity.KindUser, Name: "root", Traits: map[string][]string{"groups": {"admins"}}}
	h.replaceCert(root, -9*time.Hour)
	out, errOut, err = kube()
	if err == nil || !strings.Contains(errOut, "run limen login") {
		t.Fatalf("kubectl with an expired certificate: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(h.profile().Dir, profile.FileKey)); err != nil {
		t.Fatalf("the plugin must not touch the key: %v", err)
	}
}
