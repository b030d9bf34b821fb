package profile

import (
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestParseServerURLStyle(t *testing.T) {
	for _, s := range []string{"server-name", "path", "dns"} {
		if got, err := ParseServerURLStyle(s); err != nil || string(got) != s {
			t.Errorf("ParseServerURLStyle(%q) = %q, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "DNS", "Path", " dns", "dns ", "servername", "server_name", "path\n", "dns;rm -rf /",
		"../path", "\x00", strings.Repeat("d", 10000)} {
		_, err := ParseServerURLStyle(s)
		if err == nil {
			t.Errorf("ParseServerURLStyle(%q) accepted it", s)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "want server-name") || len(msg) > 400 || strings.Contains(msg, "\n") {
			t.Errorf("ParseServerURLStyle(%.40q): %q; want the styles listed, one short line", s, msg)
		}
	}
}

func TestClusterServer(t *testing.T) {
	for _, tt := range []struct {
		proxy, cluster string
		style          ServerURLStyle
		server, sn     string
		err            string
	}{
		{"limen.example.com:443", "prod", StyleServerName, "https://limen.example.com:443", "prod.kube.limen.example.com", ""},
		{"Limen.Example.com:8443", "prod", StyleServerName, "https://Limen.Example.com:8443", "prod.kube.limen.example.com", ""},
		{"127.0.0.1:8443", "demo", StyleServerName, "https://127.0.0.1:8443", "demo.kube.127.0.0.1", ""},
		{"[::1]:8443", "demo", StyleServerName, "", "", "IPv6"},
		{"limen.example.com:443", "prod", StylePath, "https://limen.example.com:443/k8s/prod", "", ""},
		{"[::1]:8443", "demo", StylePath, "https://[::1]:8443/k8s/demo", "", ""},
		{"limen.example.com:443", "prod", StyleDNS, "https://prod.kube.limen.example.com:443", "", ""},
		{"localhost:8443", "demo", StyleDNS, "https://demo.kube.localhost:8443", "", ""},
		{"127.0.0.1:8443", "demo", StyleDNS, "", "", "not an IP address"},
		{"[::1]:8443", "demo", StyleDNS, "", "", "not an IP address"},
		{"limen.example.com", "prod", StyleDNS, "", "", "proxy address"},
		{"limen.example.com:443", "prod", ServerURLStyle("wildcard"), "", "", "not a server URL style"},
	} {
		server, sn, err := ClusterServer(tt.proxy, tt.cluster, tt.style)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ClusterServer(%s, %s, %s) = %q, %q, %v; want an error with %q", tt.proxy, tt.cluster, tt.style, server, sn, err, tt.err)
			}
			continue
		}
		if err != nil || server != tt.server || sn != tt.sn {
			t.Errorf("ClusterServer(%s, %s, %s) = %q, %q, %v; want %q, %q", tt.proxy, tt.cluster, tt.style, server, sn, err, tt.server, tt.sn)
		}
	}
}

// TestWriteKubeconfigStyles: each style writes its own file, which client-go
// reads as the style says, and the default's file keeps its name.
func TestWriteKubeconfigStyles(t *testing.T) {
	p, err := Open(t.TempDir(), "limen.example.com:8443")
	if err != nil {
		t.Fatal(err)
	}
	plugin := Plugin{Command: "/usr/bin/limen"}
	want := map[ServerURLStyle][3]string{ // file, server, tls-server-name
		StyleServerName: {"kubeconfig-prod.json", "https://limen.example.com:8443", "prod.kube.limen.example.com"},
		StylePath:       {"kubeconfig-prod.path.json", "https://limen.example.com:8443/k8s/prod", ""},
		StyleDNS:        {"kubeconfig-prod.dns.json", "https://prod.kube.limen.example.com:8443", ""},
	}
	contexts := map[string]bool{}
	for _, style := range ServerURLStyles {
		path, err := p.WriteKubeconfig("prod", style, plugin)
		if err != nil {
			t.Fatalf("%s: %v", style, err)
		}
		w := want[style]
		if filepath.Base(path) != w[0] || filepath.Dir(path) != p.Dir {
			t.Errorf("%s: wrote %s, want %s in %s", style, path, w[0], p.Dir)
		}
		cfg, err := clientcmd.LoadFromFile(path)
		if err != nil {
			t.Fatal(err)
		}
		contexts[cfg.CurrentContext] = true
		cl := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
		if cl == nil || cl.Server != w[1] || cl.TLSServerName != w[2] {
			t.Errorf("%s: cluster %+v, want server %s, tls-server-name %q", style, cl, w[1], w[2])
		}
	}
	if len(contexts) != len(ServerURLStyles) {
		t.Errorf("context names %v: merged kubeconfigs would collide", contexts)
	}
	if path, err := p.WriteKubeconfig("prod", StylePath, Plugin{Command: "/usr/bin/limen", App: "ci"}); err != nil ||
		filepath.Base(path) != "kubeconfig-prod-app-ci.path.json" {
		t.Errorf("--app ci, path style: %s, %v", path, err)
	}
	for _, bad := range []string{"../prod", "Prod", "a.b", ""} {
		if path, err := p.WriteKubeconfig(bad, StylePath, plugin); err == nil {
			t.Errorf("cluster %q: wrote %s", bad, path)
		}
	}
	if path, err := p.WriteKubeconfig("prod", ServerURLStyle("../x"), plugin); err == nil {
		t.Errorf("style ../x: wrote %s", path)
	}
}
