package profile

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"

	"github.com/limenhq/limen/gateway/ca"
)

// ExecAPIVersion is the exec credential API the plugin speaks.
const ExecAPIVersion = "client.authentication.k8s.io/v1"

// KubeconfigPath is where `limen kube login CLUSTER` writes its kubeconfig.
func (p *Profile) KubeconfigPath(cluster string) string {
	return filepath.Join(p.Dir, "kubeconfig-"+cluster+".json")
}

// Plugin says how kubectl runs the credential plugin.
type Plugin struct {
	// Command is the absolute path of the limen binary.
	Command string
	// Env is passed to the plugin (for example LIMEN_HOME).
	Env map[string]string
}

// WriteKubeconfig writes a JSON kubeconfig for cluster whose only credential
// is the exec plugin, and returns its path.
func (p *Profile) WriteKubeconfig(cluster string, plugin Plugin) (string, error) {
	if err := ca.ValidClusterName(cluster); err != nil {
		return "", err
	}
	caPEM, err := p.CAPEM()
	if err != nil {
		return "", err
	}
	name := "limen-" + cluster
	exec := &clientcmdv1.ExecConfig{
		APIVersion:      ExecAPIVersion,
		Command:         plugin.Command,
		Args:            []string{"kube", "credentials", "--proxy", p.Proxy},
		InteractiveMode: clientcmdv1.NeverExecInteractiveMode,
		InstallHint:     "Install the limen CLI and run: limen login --proxy " + p.Proxy,
	}
	for k, v := range plugin.Env {
		exec.Env = append(exec.Env, clientcmdv1.ExecEnvVar{Name: k, Value: v})
	}
	cfg := clientcmdv1.Config{
		Kind:       "Config",
		APIVersion: "v1",
		Clusters: []clientcmdv1.NamedCluster{{Name: name, Cluster: clientcmdv1.Cluster{
			Server:                   "https://" + p.Proxy + "/k8s/" + cluster,
			CertificateAuthorityData: caPEM,
		}}},
		AuthInfos:      []clientcmdv1.NamedAuthInfo{{Name: name, AuthInfo: clientcmdv1.AuthInfo{Exec: exec}}},
		Contexts:       []clientcmdv1.NamedContext{{Name: name, Context: clientcmdv1.Context{Cluster: name, AuthInfo: name}}},
		CurrentContext: name,
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode kubeconfig: %w", err)
	}
	if err := p.Ensure(); err != nil {
		return "", err
	}
	path := p.KubeconfigPath(cluster)
	if err := ca.WriteFileAtomic(path, append(data, '\n'), 0o600); err != nil {
		return "", err
	}
	return path, nil
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
