package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

func TestProxyConfig(t *testing.T) {
	dir := t.TempDir()
	yaml := filepath.Join(dir, "limen.yaml")
	os.WriteFile(yaml, []byte("data-dir: /from/yaml\nuser-cert-ttl: 2h\nlisten: 127.0.0.1:9000\n"), 0o600)
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
