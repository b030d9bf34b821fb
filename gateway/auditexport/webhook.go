package auditexport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WebhookTimeout bounds one POST of a batch.
const WebhookTimeout = 30 * time.Second

// Webhook posts batches as audit.k8s.io/v1 EventLists to the server of a
// kubeconfig-format file, as the API server's --audit-webhook-config-file
// does: the current context's cluster is the receiver (its server URL,
// certificate-authority and tls-server-name), its user the credential
// (client certificate, token or basic auth).
type Webhook struct {
	url    string
	client *http.Client
}

// LoadWebhook reads the kubeconfig-format file at path (relative file
// references are relative to it, as kubectl reads them) and builds the
// client. Errors name the key and say what to change.
func LoadWebhook(path string) (*Webhook, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("audit-webhook-config %s: %w", path, err)
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("audit-webhook-config %s: not a kubeconfig-format file: %w", path, err)
	}
	if err := clientcmd.ResolveLocalPaths(cfg); err != nil {
		return nil, fmt.Errorf("audit-webhook-config %s: %w", path, err)
	}
	rc, u, err := webhookRESTConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("audit-webhook-config %s: %w", path, err)
	}
	client, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("audit-webhook-config %s: %w", path, err)
	}
	return &Webhook{url: u.String(), client: client}, nil
}

// ParseWebhookConfig checks a kubeconfig-format webhook configuration and
// returns the receiver's URL; LoadWebhook runs the same checks on a file.
// The fuzz target drives it.
func ParseWebhookConfig(data []byte) (string, error) {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return "", fmt.Errorf("not a kubeconfig-format file: %w", err)
	}
	_, u, err := webhookRESTConfig(cfg)
	if err != nil {
		return "", err
	}
	return u.String(), nil
}

// webhookRESTConfig picks the context (current-context, or the only one)
// and checks what Limen accepts: an https server, and no credential plugin
// (exec or auth-provider), so that a configuration file never makes the
// proxy run a program.
func webhookRESTConfig(cfg *clientcmdapi.Config) (*rest.Config, *url.URL, error) {
	name := cfg.CurrentContext
	if name == "" && len(cfg.Contexts) == 1 {
		for n := range cfg.Contexts {
			name = n
		}
	}
	if name == "" {
		return nil, nil, errors.New("current-context: not set, and the file has no single context to take; set current-context")
	}
	kctx, ok := cfg.Contexts[name]
	if !ok || kctx == nil {
		return nil, nil, fmt.Errorf("current-context %q: no such context in contexts", name)
	}
	cl, ok := cfg.Clusters[kctx.Cluster]
	if !ok || cl == nil {
		return nil, nil, fmt.Errorf("contexts[%s].cluster %q: no such cluster in clusters", name, kctx.Cluster)
	}
	if cl.Server == "" {
		return nil, nil, fmt.Errorf("clusters[%s].server: not set; set it to the receiver's https:// URL", kctx.Cluster)
	}
	if a := cfg.AuthInfos[kctx.AuthInfo]; a != nil {
		if a.Exec != nil {
			return nil, nil, fmt.Errorf("users[%s].exec: credential plugins are not accepted for the audit webhook; "+
				"use client-certificate/client-key or token(-file)", kctx.AuthInfo)
		}
		if a.AuthProvider != nil {
			return nil, nil, fmt.Errorf("users[%s].auth-provider: not accepted for the audit webhook; "+
				"use client-certificate/client-key or token(-file)", kctx.AuthInfo)
		}
	}
	rc, err := clientcmd.NewNonInteractiveClientConfig(*cfg, name, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("context %q: %w", name, err)
	}
	u, err := url.Parse(rc.Host)
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("clusters[%s].server %q: %w", kctx.Cluster, rc.Host, err)
	case u.Scheme != "https":
		return nil, nil, fmt.Errorf("clusters[%s].server %q: must be an https:// URL (audit events name people and what they did)", kctx.Cluster, rc.Host)
	case u.Host == "":
		return nil, nil, fmt.Errorf("clusters[%s].server %q: no host", kctx.Cluster, rc.Host)
	case u.User != nil:
		return nil, nil, fmt.Errorf("clusters[%s].server: carries a user name or password; put credentials in users", kctx.Cluster)
	case rc.Insecure:
		return nil, nil, fmt.Errorf("clusters[%s].insecure-skip-tls-verify: not accepted; set certificate-authority(-data)", kctx.Cluster)
	}
	u.Fragment = ""
	rc.Timeout = WebhookTimeout
	return rc, u, nil
}

// Name is "webhook".
func (w *Webhook) Name() string { return "webhook" }

// Deliver posts batch as one EventList and returns nil only on a 2xx
// answer; any other answer is an error that says the status and the start
// of the body.
func (w *Webhook) Deliver(ctx context.Context, batch []auditv1.Event) error {
	list := auditv1.EventList{Items: batch}
	list.APIVersion, list.Kind = auditv1.SchemeGroupVersion.String(), "EventList"
	body, err := json.Marshal(&list)
	if err != nil {
		return fmt.Errorf("encode event list: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("audit webhook: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(req)
	if err != nil {
		return fmt.Errorf("audit webhook: %w", err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // let the connection be reused
	if resp.StatusCode/100 == 2 {
		return nil
	}
	return &StatusError{Code: resp.StatusCode, Body: strings.TrimSpace(string(snippet))}
}

// StatusError is a receiver's refusal of a batch: its HTTP status and the
// start of its answer.
type StatusError struct {
	Code int
	Body string
}

func (e *StatusError) Error() string {
	what := "failed"
	if e.Code/100 == 4 {
		what = "refused the batch"
	}
	return fmt.Sprintf("audit webhook %s: HTTP %d: %q", what, e.Code, e.Body)
}
