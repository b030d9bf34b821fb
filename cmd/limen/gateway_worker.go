package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/limenhq/limen/gateway/buildinfo"
	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/tunnel"
	"github.com/limenhq/limen/gateway/worker"
)

// workerKubeConfig is how the worker reaches its API server.
type workerKubeConfig struct {
	APIServer string
	CAFile    string
	TokenFile string
	Labels    map[string]string
}

func addWorkerKubeFlags(f *pflag.FlagSet) {
	f.String("kube-api-server", "", "the API server's https URL (default: the in-cluster address)")
	f.String("kube-ca-file", worker.InClusterCAFile, "CA bundle that verifies the API server")
	f.String("kube-token-file", worker.InClusterTokenFile, "ServiceAccount token file, re-read every minute")
	f.StringSlice("kube-cluster-label", nil, "cluster label KEY=VALUE the policy sees (repeatable; must match the proxy's --cluster-label)")
}

func loadWorkerKubeConfig(v *viper.Viper) (workerKubeConfig, error) {
	c := workerKubeConfig{
		APIServer: v.GetString("kube-api-server"), CAFile: v.GetString("kube-ca-file"),
		TokenFile: v.GetString("kube-token-file"), Labels: map[string]string{},
	}
	if c.APIServer == "" {
		c.APIServer = worker.InClusterAPIServer()
	}
	if c.APIServer == "" {
		return c, fmt.Errorf("kube-api-server: required outside a pod; set --kube-api-server https://HOST:PORT")
	}
	if c.TokenFile == "" {
		return c, fmt.Errorf("kube-token-file: required")
	}
	for _, kv := range v.GetStringSlice("kube-cluster-label") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return c, fmt.Errorf("kube-cluster-label %q: want KEY=VALUE", kv)
		}
		c.Labels[k] = val
	}
	return c, nil
}

// runWorkerGateway serves the cluster through the tunnel until ctx ends.
func runWorkerGateway(ctx context.Context, v *viper.Viper, kc workerKubeConfig, id *enroll.WorkerIdentity, c workerConfig, log *slog.Logger) error {
	dataDir := c.DataDir
	upstream, rt, err := worker.Upstream(kc.APIServer, kc.CAFile)
	if err != nil {
		return err
	}
	tokens := &worker.TokenFile{Path: kc.TokenFile}
	if _, err := tokens.Token(); err != nil {
		// Not fatal: every request is answered 503 until the file is readable.
		log.Error("ServiceAccount token unreadable; requests get 503 until it is", "err", err)
	}
	popts, err := policyOptions(v, log)
	if err != nil {
		return err
	}
	pol, err := policy.New(ctx, popts)
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	defer pol.Close()
	go func() { _ = pol.Run(ctx) }()

	backlog, err := streamBacklogDir(dataDir)
	if err != nil {
		return err
	}
	h := &worker.Handler{
		Cluster: policy.Cluster{Name: id.Cluster, Labels: kc.Labels}, GrantKey: id.GrantKey, Policy: pol,
		Upstream: upstream, Transport: rt, Token: tokens.Token,
		Logger: log.With("component", "worker"), Now: time.Now, RecordingMaxBytes: c.RecordingMaxBytes,
		Backlog: worker.Backlog{Dir: backlog},
	}
	hooks := &proxyHooks{log: log, handlers: map[string]func(context.Context, tunnel.Message){}}
	var client *tunnel.Client
	reg := workerLocks(h, hooks, func() *tunnel.Client { return client }, log)
	defer reg.Close()
	client = &tunnel.Client{
		Addr: id.Proxy, TLSConfig: id.TLSConfig(),
		Hello:     tunnel.Hello{Cluster: id.Cluster, WorkerID: workerID(dataDir), Version: buildinfo.Version},
		Handler:   h.ServeStream,
		Logger:    log.With("component", "tunnel"),
		OnMessage: hooks.onMessage,
		OnConnect: func(context.Context, tunnel.HelloAck) {
			log.Info("connected to proxy", "proxy", id.Proxy, "cluster", id.Cluster)
		},
	}
	stopRecording, err := startWorkerRecording(ctx, dataDir, kc.CAFile, h, client, log)
	if err != nil {
		return err
	}
	defer stopRecording()
	log.Info("worker started", "cluster", id.Cluster, "api_server", upstream.String(), "policy", popts.Source())
	return client.Run(ctx)
}

// streamBacklogDir is DATA/streams, where streams keep the API server output
// they read ahead of their users (worker.Backlog). Its files are unlinked
// as soon as they are created; any left by a crash are removed here.
func streamBacklogDir(dataDir string) (string, error) {
	dir := filepath.Join(dataDir, "streams")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("stream backlog directory: %w; check that the worker can write its data directory", err)
	}
	stale, _ := filepath.Glob(filepath.Join(dir, "limen-backlog-*"))
	for _, f := range stale {
		_ = os.Remove(f)
	}
	return dir, nil
}

// proxyHooks routes the proxy's control messages to the worker features
// that registered for them, before the tunnel starts.
type proxyHooks struct {
	log      *slog.Logger
	handlers map[string]func(ctx context.Context, m tunnel.Message)
}

func (h *proxyHooks) handle(typ string, fn func(ctx context.Context, m tunnel.Message)) {
	h.handlers[typ] = fn
}

func (h *proxyHooks) onMessage(ctx context.Context, m tunnel.Message) {
	fn, ok := h.handlers[m.Type]
	if !ok {
		h.log.Warn("unknown control message from proxy", "type", m.Type)
		return
	}
	fn(ctx, m)
}

// workerID is stable across restarts of the same worker: its host name and
// data directory.
func workerID(dataDir string) string {
	host, _ := os.Hostname()
	sum := sha256.Sum256([]byte(dataDir))
	return host + "-" + hex.EncodeToString(sum[:4])
}
