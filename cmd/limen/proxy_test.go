package main

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/proxy"
)

func TestProxyConfig(t *testing.T) {
	dir := t.TempDir()
	yaml := filepath.Join(dir, "limen.yaml")
	os.WriteFile(yaml, []byte("data-dir: /from/yaml\nuser-cert-ttl: 2h\nlisten: 127.0.0.1:9000\n"), 0o600)
	limitsYAML := filepath.Join(dir, "limits.yaml")
	os.WriteFile(limitsYAML, []byte("data-dir: /from/yaml\ntls-handshake-timeout: 3s\nread-header-timeout: 4s\nread-timeout: 5m\n"+
		"write-timeout: 1m\nidle-timeout: 90s\nmax-conns-per-ip: 2\n"), 0o600)
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		want  string // error substring, or "" for success
		check func(t *testing.T, c proxyConfig)
	}{
		{name: "missing data-dir", want: "data-dir"},
		{name: "defaults", args: []string{"--data-dir", dir}, check: func(t *testing.T, c proxyConfig) {
			if c.Listen != "127.0.0.1:8443" || c.UserCertTTL != 8*time.Hour {
				t.Errorf("defaults %+v", c)
			}
		}},
		{name: "ttl above max", args: []string{"--data-dir", dir, "--user-cert-ttl", "48h"}, want: "user-cert-ttl"},
		{name: "ttl too short", args: []string{"--data-dir", dir, "--user-cert-ttl", "1s"}, want: "user-cert-ttl"},
		{name: "bad listen", args: []string{"--data-dir", dir, "--listen", "8443"}, want: "listen"},
		{name: "bad cluster", args: []string{"--data-dir", dir, "--clusters", "prod,../x"}, want: "clusters"},
		{name: "bad server name", args: []string{"--data-dir", dir, "--server-name", "limen.example.com,*.evil"}, want: "server-name"},
		{name: "server names", args: []string{"--data-dir", dir, "--server-name", "limen.example.com,10.0.0.1,::1"}, check: func(t *testing.T, c proxyConfig) {
			if len(c.ServerNames) != 3 {
				t.Errorf("server names %q", c.ServerNames)
			}
		}},
		{name: "worker ttl", args: []string{"--data-dir", dir, "--worker-cert-ttl", "1m"}, want: "worker-cert-ttl"},
		{name: "bad peer address", args: []string{"--data-dir", dir, "--peer-address", "https://10.0.0.5:8443"}, want: "peer-address"},
		{name: "load balancers", args: []string{"--data-dir", dir, "--proxy-protocol-from", "10.0.0.0/8,192.0.2.7"}, check: func(t *testing.T, c proxyConfig) {
			if got := fmt.Sprint(c.Limits.ProxyProtocolFrom); got != "[10.0.0.0/8 192.0.2.7/32]" {
				t.Errorf("proxy-protocol-from %s", got)
			}
		}},
		{name: "load balancer by name", args: []string{"--data-dir", dir, "--proxy-protocol-from", "lb.example.com"}, want: "proxy-protocol-from"},
		{name: "load balancer prefix too long", env: map[string]string{"LIMEN_PROXY_PROTOCOL_FROM": "10.0.0.0/33"}, args: []string{"--data-dir", dir}, want: "proxy-protocol-from"},
		{name: "lock view trusted too briefly", args: []string{"--data-dir", dir, "--lock-stale-after", "1s"}, want: "lock-stale-after"},
		{name: "unknown lock mode", env: map[string]string{"LIMEN_LOCK_MODE": "best_effort"}, args: []string{"--data-dir", dir}, want: "lock-mode"},
		{name: "peer address without port", env: map[string]string{"LIMEN_PEER_ADDRESS": "10.0.0.5"}, args: []string{"--data-dir", dir}, want: "peer-address"},
		{name: "peer address from env", env: map[string]string{"LIMEN_PEER_ADDRESS": "proxy-0.limen:8443"}, args: []string{"--data-dir", dir}, check: func(t *testing.T, c proxyConfig) {
			if c.PeerAddress != "proxy-0.limen:8443" || c.gateway(policy.Options{}, nil).PeerAddress != "proxy-0.limen:8443" {
				t.Errorf("peer address %q", c.PeerAddress)
			}
		}},
		{name: "yaml", args: []string{"--config", yaml}, check: func(t *testing.T, c proxyConfig) {
			if c.DataDir != "/from/yaml" || c.UserCertTTL != 2*time.Hour || c.Listen != "127.0.0.1:9000" {
				t.Errorf("yaml %+v", c)
			}
		}},
		{name: "env over yaml", args: []string{"--config", yaml}, env: map[string]string{"LIMEN_USER_CERT_TTL": "3h"}, check: func(t *testing.T, c proxyConfig) {
			if c.UserCertTTL != 3*time.Hour || c.DataDir != "/from/yaml" {
				t.Errorf("env %+v", c)
			}
		}},
		{name: "flag over env", args: []string{"--config", yaml, "--user-cert-ttl", "4h"}, env: map[string]string{"LIMEN_USER_CERT_TTL": "3h"}, check: func(t *testing.T, c proxyConfig) {
			if c.UserCertTTL != 4*time.Hour {
				t.Errorf("flag %+v", c)
			}
		}},
		{name: "env garbage", args: []string{"--data-dir", dir}, env: map[string]string{"LIMEN_USER_CERT_TTL": "forever"}, want: "user-cert-ttl"},
		{name: "missing yaml", args: []string{"--config", filepath.Join(dir, "nope.yaml")}, want: "does not exist"},
		{name: "port limit defaults", args: []string{"--data-dir", dir}, check: func(t *testing.T, c proxyConfig) {
			if !reflect.DeepEqual(c.Limits, proxy.DefaultLimits()) {
				t.Errorf("limits %+v, want %+v", c.Limits, proxy.DefaultLimits())
			}
		}},
		{name: "port limits from flag, env and yaml", args: []string{"--config", limitsYAML, "--write-timeout", "30s"},
			env: map[string]string{"LIMEN_MAX_CONNS_PER_IP": "8", "LIMEN_DENIED_AUDIT_INTERVAL": "10s"}, check: func(t *testing.T, c proxyConfig) {
				want := proxy.Limits{HandshakeTimeout: 3 * time.Second, ReadHeaderTimeout: 4 * time.Second, ReadTimeout: 5 * time.Minute,
					WriteTimeout: 30 * time.Second, IdleTimeout: 90 * time.Second, MaxConnsPerIP: 8, DeniedInterval: 10 * time.Second}
				if !reflect.DeepEqual(c.Limits, want) {
					t.Errorf("limits %+v, want %+v", c.Limits, want)
				}
			}},
		{name: "handshake timeout 0", args: []string{"--data-dir", dir, "--tls-handshake-timeout", "0"}, want: "tls-handshake-timeout 0s: must be between 1s"},
		{name: "header timeout huge", args: []string{"--data-dir", dir, "--read-header-timeout", "1h"}, want: "read-header-timeout 1h0m0s: must be between"},
		{name: "header over read", args: []string{"--data-dir", dir, "--read-header-timeout", "20s", "--read-timeout", "10s"}, want: "read-header-timeout 20s: must not exceed read-timeout"},
		{name: "read timeout", args: []string{"--data-dir", dir, "--read-timeout", "-1s"}, want: "read-timeout -1s"},
		{name: "write timeout", args: []string{"--data-dir", dir, "--write-timeout", "10ms"}, want: "write-timeout 10ms"},
		{name: "idle timeout", args: []string{"--data-dir", dir, "--idle-timeout", "0s"}, want: "idle-timeout 0s"},
		{name: "conns per ip", args: []string{"--data-dir", dir, "--max-conns-per-ip", "0"}, want: "max-conns-per-ip 0: must be between 1"},
		{name: "conns per ip env garbage", args: []string{"--data-dir", dir}, env: map[string]string{"LIMEN_MAX_CONNS_PER_IP": "many"}, want: "max-conns-per-ip"},
		{name: "denied interval", args: []string{"--data-dir", dir, "--denied-audit-interval", "100ms"}, want: "denied-audit-interval 100ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			root := newRootCmd()
			var got proxyConfig
			var cfgErr error
			proxy, _, _ := root.Find([]string{"proxy"})
			proxy.RunE = func(cmd *cobra.Command, _ []string) error {
				got, cfgErr = loadProxyConfig(cmd)
				return nil
			}
			root.SetArgs(append([]string{"proxy"}, tt.args...))
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
			if tt.want != "" {
				if cfgErr == nil || !strings.Contains(cfgErr.Error(), tt.want) {
					t.Fatalf("error %v, want one naming %q", cfgErr, tt.want)
				}
				return
			}
			if cfgErr != nil {
				t.Fatal(cfgErr)
			}
			if tt.check != nil {
				tt.check(t, got)
			}
		})
	}
}

// TestProxyHelpDocumentsLimits: each port limit is documented in limen
// proxy --help with its default.
func TestProxyHelpDocumentsLimits(t *testing.T) {
	root := newRootCmd()
	var out strings.Builder
	root.SetOut(&out)
	root.SetArgs([]string{"proxy", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"--tls-handshake-timeout duration", "(default 10s)", "--read-header-timeout duration",
		"--read-timeout duration", "--write-timeout duration", "(default 2m0s)", "--idle-timeout duration",
		"--max-conns-per-ip int", "(default 256)", "--denied-audit-interval duration", "(default 1m0s)",
		"streams (watch, exec, logs -f, port-forward) excepted",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("limen proxy --help does not mention %q", want)
		}
	}
}
