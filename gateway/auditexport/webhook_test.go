package auditexport

import (
	"strings"
	"testing"
)

const goodConfig = `apiVersion: v1
kind: Config
clusters:
- name: siem
  cluster:
    server: https://siem.example:9443/k8s-audit
    certificate-authority-data: ""
users:
- name: limen
  user:
    token: t
contexts:
- name: default
  context: {cluster: siem, user: limen}
current-context: default
`

func TestParseWebhookConfig(t *testing.T) {
	tests := []struct {
		name, config, want, err string
	}{
		{"good", goodConfig, "https://siem.example:9443/k8s-audit", ""},
		{"single context without current-context", strings.Replace(goodConfig, "current-context: default\n", "", 1),
			"https://siem.example:9443/k8s-audit", ""},
		{"http", strings.Replace(goodConfig, "https://", "http://", 1), "", "must be an https:// URL"},
		{"no server", strings.Replace(goodConfig, "server: https://siem.example:9443/k8s-audit", "server: ''", 1), "", "clusters[siem].server"},
		{"user in URL", strings.Replace(goodConfig, "https://", "https://u:p@", 1), "", "user name or password"},
		{"unknown context", strings.Replace(goodConfig, "current-context: default", "current-context: other", 1), "", `current-context "other"`},
		{"unknown cluster", strings.Replace(goodConfig, "{cluster: siem", "{cluster: nope", 1), "", `cluster "nope"`},
		{"exec plugin", strings.Replace(goodConfig, "token: t", "exec: {command: /bin/sh, apiVersion: client.authentication.k8s.io/v1}", 1), "", "users[limen].exec"},
		{"auth provider", strings.Replace(goodConfig, "token: t", "auth-provider: {name: gcp}", 1), "", "users[limen].auth-provider"},
		{"insecure", strings.Replace(goodConfig, `certificate-authority-data: ""`, "insecure-skip-tls-verify: true", 1), "", "insecure-skip-tls-verify"},
		{"not yaml", "{{{", "", "not a kubeconfig-format file"},
		{"empty", "", "", "current-context"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseWebhookConfig([]byte(tt.config))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestLoadWebhookMissingFile(t *testing.T) {
	_, err := LoadWebhook("/nonexistent/webhook.kubeconfig")
	if err == nil || !strings.Contains(err.Error(), "audit-webhook-config") {
		t.Fatalf("error %v, want one naming audit-webhook-config", err)
	}
}

// FuzzParseWebhookConfig: any bytes as a webhook configuration either
// parse to an https URL or are an error, never a panic.
func FuzzParseWebhookConfig(f *testing.F) {
	f.Add([]byte(goodConfig))
	f.Add([]byte(strings.Replace(goodConfig, "https://", "http://", 1)))
	f.Add([]byte("apiVersion: v1\nkind: Config\n"))
	f.Add([]byte(`{"apiVersion":"v1","kind":"Config","clusters":[{"name":"a","cluster":{"server":"https://[::1]:1"}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		u, err := ParseWebhookConfig(data)
		if err == nil && !strings.HasPrefix(u, "https://") {
			t.Fatalf("accepted %q for %q", u, data)
		}
	})
}
