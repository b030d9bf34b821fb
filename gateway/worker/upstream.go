package worker

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/limenhq/limen/gateway/stream/ws"
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
	u, err := ParseAPIServer(apiServer)
	if err != nil {
		return nil, nil, err
	}
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

// ParseAPIServer checks the kube-api-server setting: an https URL with a
// host and no path. It is the one check, run by cmd before the worker
// enrolls (a refused URL must not cost the join token) and by Upstream.
func ParseAPIServer(apiServer string) (*url.URL, error) {
	u, err := url.Parse(apiServer)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("kube-api-server %q: not a URL; want https://HOST:PORT", apiServer)
	}
	if u.Scheme != "https" {
		// The ServiceAccount token would travel in clear.
		return nil, fmt.Errorf("kube-api-server %q: Limen talks to the API server only over TLS; use https://", apiServer)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("kube-api-server %q: must not carry a path", apiServer)
	}
	u.Path = ""
	return u, nil
}

// offerDecodable rewrites an upgrade request so the API server can only
// agree to a protocol the worker decodes: of the WebSocket protocols only
// those ws.ModeFor knows (the binary channel protocols v4 and v5 and SPDY
// inside WebSocket) are kept, in the client's order, and no WebSocket
// extension (compression) is offered. SPDY's X-Stream-Protocol-Version
// offers are kept as they are.
func offerDecodable(h http.Header) {
	h.Del("Sec-WebSocket-Extensions")
	keep := decodableProtocols(h)
	h.Del("Sec-WebSocket-Protocol")
	if len(keep) > 0 {
		h.Set("Sec-WebSocket-Protocol", strings.Join(keep, ", "))
	}
}

// decodableProtocols are the WebSocket protocols a request offers that the
// worker decodes, in the order offered.
func decodableProtocols(h http.Header) []string {
	var keep []string
	for _, v := range h.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				if _, err := ws.ModeFor(p); err == nil {
					keep = append(keep, p)
				}
			}
		}
	}
	return keep
}

// undecodableOffer is the refusal of a WebSocket upgrade that offers no
// protocol the worker decodes: whatever the API server chose, Limen could
// not record it, so the request must not reach the API server at all (the
// command would run). nil for any other request.
func undecodableOffer(h http.Header) *refusal {
	if !strings.EqualFold(strings.TrimSpace(h.Get("Upgrade")), "websocket") || len(decodableProtocols(h)) > 0 {
		return nil
	}
	offered := strings.Join(h.Values("Sec-WebSocket-Protocol"), ", ")
	if offered == "" {
		offered = "none"
	}
	return &refusal{code: http.StatusBadRequest, msg: fmt.Sprintf("Limen relays WebSocket streams only with the binary protocols %s, %s and %s, "+
		"which it can record; this client offered %s. Use a client that offers one of them, as kubectl does",
		ws.ProtocolV5, ws.ProtocolV4, ws.ProtocolSPDYTunnel, clipOffer(offered))}
}

// clipOffer bounds the client's offer quoted back in a refusal.
func clipOffer(s string) string {
	const max = 200
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

func (h *Handler) upgradeTransport() http.RoundTripper {
	if h.Upgrades != nil {
		return h.Upgrades
	}
	return h.Transport
}

// UpgradeTransport returns the transport for upgrade requests to the API
// server: HTTP/1.1 only (Go's HTTP/2 transport refuses SPDY upgrades), TLS
// 1.2 or later, verified with the CA in caFile.
func UpgradeTransport(caFile string) (http.RoundTripper, error) {
	cfg, err := rest.TLSConfigFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}})
	if err != nil {
		return nil, fmt.Errorf("kube-ca-file %s: %w", caFile, err)
	}
	if cfg == nil {
		return nil, fmt.Errorf("kube-ca-file: required for TLS to the API server")
	}
	cfg.NextProtos = []string{"http/1.1"}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{TLSClientConfig: cfg, DialContext: d.DialContext, TLSHandshakeTimeout: 10 * time.Second,
		ResponseHeaderTimeout: time.Minute}, nil
}

// gotConn learns the connection an upgrade request went out on: the
// response body of a 101 hides it, and the relay needs it to half-close.
type gotConn struct {
	mu   sync.Mutex
	conn net.Conn
}

func (g *gotConn) trace(r *http.Request) *http.Request {
	return r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			g.mu.Lock()
			g.conn = i.Conn
			g.mu.Unlock()
		},
	}))
}

func (g *gotConn) get() net.Conn {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.conn
}
