package profile

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"

	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/kpath"
)

// ExecAPIVersion is the exec credential API the plugin speaks.
const ExecAPIVersion = "client.authentication.k8s.io/v1"

// KubeconfigPath is where `limen kube login CLUSTER` writes its kubeconfig.
func (p *Profile) KubeconfigPath(cluster string) string {
	return filepath.Join(p.Dir, "kubeconfig-"+cluster+".json")
}

// ServerURLStyle is how a kubeconfig names its cluster to the proxy
// (limen kube login --server-url-style).
type ServerURLStyle string

const (
	// StyleServerName: the server is https://HOST:PORT and the
	// tls-server-name CLUSTER.kube.HOST names the cluster. No DNS record is
	// needed; kubectl, client-go, Helm and the JavaScript client honour it.
	StyleServerName ServerURLStyle = "server-name"
	// StylePath: the server is https://HOST:PORT/k8s/CLUSTER, without
	// tls-server-name, for clients that ignore tls-server-name (the Python
	// client). Commands that drop the server URL's path (kubectl get --raw,
	// kubectl proxy) cannot reach the cluster with it.
	StylePath ServerURLStyle = "path"
	// StyleDNS: the server is https://CLUSTER.kube.HOST:PORT, for operators
	// whose wildcard DNS name *.kube.HOST points at the proxy; every client
	// sends that name, since it is the URL's host.
	StyleDNS ServerURLStyle = "dns"
)

// ServerURLStyles are the styles, the default first.
var ServerURLStyles = []ServerURLStyle{StyleServerName, StylePath, StyleDNS}

// ParseServerURLStyle returns the style s names, or an error that lists the
// styles.
func ParseServerURLStyle(s string) (ServerURLStyle, error) {
	for _, st := range ServerURLStyles {
		if s == string(st) {
			return st, nil
		}
	}
	if len(s) > 32 {
		s = s[:32] + "…"
	}
	return "", fmt.Errorf("%q is not a server URL style: want server-name (the default: https://HOST:PORT and tls-server-name), "+
		"path (https://HOST:PORT/k8s/CLUSTER, for clients that ignore tls-server-name) or dns (https://CLUSTER.kube.HOST:PORT, with a wildcard DNS name)", s)
}

// kubeconfigPath is the file for cluster, app (or "") and style: the
// default style keeps the name it always had; the others add ".STYLE", a
// dot that no cluster or client name contains, so that a kubeconfig for
// the Python client never replaces the one kubectl uses.
func (p *Profile) kubeconfigPath(cluster, app string, style ServerURLStyle) string {
	path := p.KubeconfigPath(cluster)
	if app != "" {
		path = p.AppKubeconfigPath(cluster, app)
	}
	if style != StyleServerName {
		path = strings.TrimSuffix(path, ".json") + "." + string(style) + ".json"
	}
	return path
}

// ClusterServer is the server URL and the TLS server name ("" for none) of
// a kubeconfig that reaches cluster on the proxy at HOST:PORT in style.
func ClusterServer(proxy, cluster string, style ServerURLStyle) (server, tlsServerName string, err error) {
	switch style {
	case StyleServerName:
		sn, err := ServerName(proxy, cluster)
		return "https://" + proxy, sn, err
	case StylePath:
		return "https://" + proxy + kpath.Prefix + cluster, "", nil
	case StyleDNS:
		host, port, err := net.SplitHostPort(proxy)
		if err != nil {
			return "", "", fmt.Errorf("proxy address %q: %w", proxy, err)
		}
		if net.ParseIP(host) != nil {
			return "", "", fmt.Errorf("proxy address %q: the dns style needs the proxy's DNS name, under which *.kube.NAME is a wildcard DNS record, "+
				"not an IP address; log in with that name, or use the server-name style", proxy)
		}
		return "https://" + net.JoinHostPort(kpath.ServerName(cluster, host), port), "", nil
	}
	_, err = ParseServerURLStyle(string(style))
	return "", "", err
}

// Plugin says how kubectl runs the credential plugin.
type Plugin struct {
	// Command is the absolute path of the limen binary.
	Command string
	// Env is passed to the plugin (for example LIMEN_HOME).
	Env map[string]string
	// App, if set, is the application client the plugin's certificate is
	// bound to (limen kube login --app); empty is the command line's.
	App string
}

// WriteKubeconfig writes a JSON kubeconfig for cluster whose only credential
// is the exec plugin, and returns its path. style says how it names the
// cluster (ClusterServer). The default, StyleServerName, is the proxy's
// address with no path and the cluster in the TLS server name: kubectl get
// --raw, kubectl proxy and clients that build request URIs themselves drop
// a server URL's path, but they send the server name.
func (p *Profile) WriteKubeconfig(cluster string, style ServerURLStyle, plugin Plugin) (string, error) {
	if err := ca.ValidClusterName(cluster); err != nil {
		return "", err
	}
	return p.writeKubeconfig(p.kubeconfigPath(cluster, plugin.App, style), []string{cluster}, style, plugin)
}

// AllKubeconfigPath is where `limen kube login --all` writes its kubeconfig.
func (p *Profile) AllKubeconfigPath() string { return filepath.Join(p.Dir, "kubeconfig-all.json") }

// WriteAllKubeconfig writes one JSON kubeconfig with a context per cluster
// (named limen-CLUSTER, the first one current), so that kubectl --context
// switches between them, and returns its path. It names each cluster in
// the default style (StyleServerName).
func (p *Profile) WriteAllKubeconfig(clusters []string, plugin Plugin) (string, error) {
	if len(clusters) == 0 {
		return "", fmt.Errorf("no cluster to write a kubeconfig for (limen kube ls lists yours)")
	}
	return p.writeKubeconfig(p.AllKubeconfigPath(), clusters, StyleServerName, plugin)
}

func (p *Profile) writeKubeconfig(path string, clusters []string, style ServerURLStyle, plugin Plugin) (string, error) {
	caPEM, err := p.CAPEM()
	if err != nil {
		return "", err
	}
	args := []string{"kube", "credentials", "--proxy", p.Proxy}
	suffix := ""
	if plugin.App != "" {
		if err := identity.ValidClient(plugin.App); err != nil {
			return "", fmt.Errorf("--app: %w", err)
		}
		suffix = "-app-" + plugin.App
		args = append(args, "--app", plugin.App)
	}
	if style != StyleServerName {
		// Merged with the default kubeconfig (KUBECONFIG=a:b), the names
		// must not collide.
		suffix += "." + string(style)
	}
	exec := &clientcmdv1.ExecConfig{
		APIVersion:      ExecAPIVersion,
		Command:         plugin.Command,
		Args:            args,
		InteractiveMode: clientcmdv1.NeverExecInteractiveMode,
		InstallHint:     "Install the limen CLI and run: limen login --proxy " + p.Proxy,
	}
	for k, v := range plugin.Env {
		exec.Env = append(exec.Env, clientcmdv1.ExecEnvVar{Name: k, Value: v})
	}
	cfg := clientcmdv1.Config{Kind: "Config", APIVersion: "v1"}
	for _, cluster := range clusters {
		if err := ca.ValidClusterName(cluster); err != nil {
			return "", err
		}
		server, sn, err := ClusterServer(p.Proxy, cluster, style)
		if err != nil {
			return "", err
		}
		name := "limen-" + cluster + suffix
		cfg.Clusters = append(cfg.Clusters, clientcmdv1.NamedCluster{Name: name, Cluster: clientcmdv1.Cluster{
			Server:                   server,
			TLSServerName:            sn,
			CertificateAuthorityData: caPEM,
		}})
		cfg.AuthInfos = append(cfg.AuthInfos, clientcmdv1.NamedAuthInfo{Name: name, AuthInfo: clientcmdv1.AuthInfo{Exec: exec}})
		cfg.Contexts = append(cfg.Contexts, clientcmdv1.NamedContext{Name: name, Context: clientcmdv1.Context{Cluster: name, AuthInfo: name}})
		if cfg.CurrentContext == "" {
			cfg.CurrentContext = name
		}
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode kubeconfig: %w", err)
	}
	if err := p.Ensure(); err != nil {
		return "", err
	}
	if err := ca.WriteFileAtomic(path, append(data, '\n'), 0o600); err != nil {
		return "", err
	}
	return path, nil
}

// ServerName is the TLS server name that routes to cluster on the proxy at
// HOST:PORT: CLUSTER.kube.HOST (kpath.ServerName). The proxy's generated
// certificate covers *.kube.HOST for each of its names, so HOST must be one
// of them (localhost, 127.0.0.1 or a --server-name); no DNS record is
// needed, since the client still dials HOST.
func ServerName(proxy, cluster string) (string, error) {
	host, _, err := net.SplitHostPort(proxy)
	if err != nil {
		return "", fmt.Errorf("proxy address %q: %w", proxy, err)
	}
	if strings.Contains(host, ":") {
		// An IPv6 literal is not a DNS name, and neither is anything ending in
		// one; the proxy's loopback names work for a local proxy.
		return "", fmt.Errorf("proxy address %q: an IPv6 address cannot end a TLS server name; log in with the proxy's DNS name (or localhost)", proxy)
	}
	return kpath.ServerName(cluster, host), nil
}

// ExecCredential is the plugin's output for c: the certificate, the key
// and when kubectl must ask again.
func (c *Credentials) ExecCredential() ([]byte, error) {
	exp := metav1.NewTime(c.Cert.NotAfter.Truncate(time.Second))
	ec := clientauthv1.ExecCredential{
		TypeMeta: metav1.TypeMeta{Kind: "ExecCredential", APIVersion: ExecAPIVersion},
		Status: &clientauthv1.ExecCredentialStatus{
			ExpirationTimestamp:   &exp,
			ClientCertificateData: string(c.CertPEM),
			ClientKeyData:         string(c.KeyPEM),
		},
	}
	return json.Marshal(ec)
}
