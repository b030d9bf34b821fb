package worker

import (
	"fmt"
	"net/http"
	"net/url"
	"os"

	"k8s.io/client-go/rest"
)

// In-cluster defaults for the API server, its CA and the worker's token.
const (
	InClusterCAFile    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
	InClusterTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
)

// InClusterAPIServer is the API server URL a pod sees, or "" outside a pod.
func InClusterAPIServer() string {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return ""
	}
	return "https://" + host + ":" + port
}

// Upstream builds the transport to the one API server this worker talks to:
// https only, TLS 1.2 or later (client-go's default), the given CA, and no
// client-side rate limit, so users are never throttled by the worker.
func Upstream(apiServer, caFile string) (*url.URL, http.RoundTripper, error) {
	u, err := url.Parse(apiServer)
	if err != nil || u.Host == "" {
		return nil, nil, fmt.Errorf("kube-api-server %q: not a URL; want https://HOST:PORT", apiServer)
	}
	if u.Scheme != "https" {
		return nil, nil, fmt.Errorf("kube-api-server %q: Limen talks to the API server only over TLS; use https://", apiServer)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, nil, fmt.Errorf("kube-api-server %q: must not carry a path", apiServer)
	}
	u.Path = ""
	if _, err := os.Stat(caFile); err != nil {
		return nil, nil, fmt.Errorf("kube-ca-file: %w", err)
	}
	cfg := &rest.Config{
		Host:            u.String(),
		TLSClientConfig: rest.TLSClientConfig{CAFile: caFile},
		QPS:             -1, // no client-side rate limiting
		UserAgent:       "limen-worker",
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kube-ca-file %s: %w", caFile, err)
	}
	return u, rt, nil
}
