package worker

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/limenhq/limen/gateway/buildinfo"
	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/impersonate"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/tunnel"
)

// Config is everything the worker needs to build itself. cmd/limen fills
// it from flags, the environment and the config file, and validates it with
// errors that name the keys.
type Config struct {
	// Identity is the worker's enrollment: the proxy's address and CA, the
	// worker certificate bound to its cluster, the grant-verification key.
	Identity *enroll.WorkerIdentity
	// DataDir holds the recording spool (DataDir/recordings) and the stream
	// backlog (DataDir/streams), and names the worker to the proxy.
	DataDir string
	// APIServer is the API server's https URL, CAFile the CA bundle that
	// verifies it, TokenFile the ServiceAccount token (re-read as it
	// rotates).
	APIServer, CAFile, TokenFile string
	// Labels are the cluster labels the policy sees.
	Labels map[string]string
	// Impersonation is the Kubernetes user prefix and the RBAC variant the
	// cluster grants (--kube-user-prefix, --kube-impersonation).
	Impersonation impersonate.Config
	// Policy is where the worker's own policy comes from.
	Policy policy.Options
	// RecordingMaxBytes caps each exec and attach recording (0: default).
	RecordingMaxBytes int64
	// RecordingSpoolMaxBytes limits the spool of recordings waiting for
	// upload (0: recording.DefaultSpoolMaxBytes); when it is full, new exec
	// and attach sessions are refused.
	RecordingSpoolMaxBytes int64
	// ShutdownTimeout bounds the drain once Run's context ends (see
	// Server.drain); 0 is DefaultShutdownTimeout. Handover is how long the
	// drain waits for another worker to take new streams; 0 is
	// DefaultHandover, negative waits not at all.
	ShutdownTimeout, Handover time.Duration
	Logger                    *slog.Logger
}

// Server is the assembled worker: the request handler, its own copy of the
// proxy's locks and the session watchdog, the recording spool and its
// uploader, and the tunnel to the proxy. Build it with New, run it with
// Run, and Close it when Run returned.
type Server struct {
	// Handler serves each request stream the proxy opens.
	Handler *Handler
	// Tunnel is the worker's connections to the proxies: the enrolled
	// address, and each proxy the proxies advertise (tunnel.Pool).
	Tunnel   *tunnel.Pool
	Policy   *policy.Engine
	Sessions *sessions.Registry

	uploader        *Uploader
	relay           *EventRelay
	policySource    string
	shutdownTimeout time.Duration
	handover        time.Duration
	log             *slog.Logger
}

// spoolDirName is the recording spool inside the worker's data directory;
// backlogDirName is where streams keep what they read ahead of their users.
const (
	spoolDirName   = "recordings"
	backlogDirName = "streams"
)

// SpoolDir is the recording spool in the worker's data directory.
func SpoolDir(dataDir string) string { return filepath.Join(dataDir, spoolDirName) }

// New builds the worker: the transports to the API server, the policy, the
// handler with its locks, session registry, spool, backlog and event relay,
// and the tunnel client whose control stream carries them. It starts
// nothing; Run does.
func New(ctx context.Context, c Config) (_ *Server, err error) {
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	id := c.Identity
	if id == nil {
		return nil, errors.New("worker: Identity is required; enroll first")
	}
	if err := c.Impersonation.Validate(); err != nil {
		return nil, fmt.Errorf("worker: impersonation: %w", err)
	}
	upstream, rt, err := Upstream(c.APIServer, c.CAFile)
	if err != nil {
		return nil, err
	}
	upgrades, err := UpgradeTransport(c.CAFile)
	if err != nil {
		return nil, err
	}
	tokens := &TokenFile{Path: c.TokenFile}
	if _, err := tokens.Token(); err != nil {
		// Not fatal: every request is answered 503 until the file is readable.
		log.Error("ServiceAccount token unreadable; requests get 503 until it is", "err", err)
	}
	backlog, err := backlogDir(c.DataDir)
	if err != nil {
		return nil, err
	}
	spool, err := recording.OpenSpoolLimit(SpoolDir(c.DataDir), c.RecordingSpoolMaxBytes)
	if err != nil {
		return nil, fmt.Errorf("recording spool in %s: %w; check that the worker can write its data directory", c.DataDir, err)
	}
	popts := c.Policy
	if popts.Logger == nil {
		popts.Logger = log
	}
	pol, err := policy.New(ctx, popts)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	set := locks.NewSet()
	s := &Server{Policy: pol, policySource: popts.Source(), log: log, shutdownTimeout: cmp.Or(c.ShutdownTimeout, DefaultShutdownTimeout),
		handover: max(cmp.Or(c.Handover, DefaultHandover), 0),
		Sessions: sessions.New(sessions.Config{Locks: set, Logger: log.With("component", "sessions"), ClientGone: proxyLost})}
	router := newProxyRouter(log)
	// The same certificate and pinned CA for every proxy: they share the
	// CA and the grant key, and their serving certificate carries the
	// enrolled name, which TLSConfig verifies whatever address is dialed.
	s.Tunnel = &tunnel.Pool{
		Addr: id.Proxy, TLSConfig: id.TLSConfig(),
		Hello:     tunnel.Hello{Cluster: id.Cluster, WorkerID: workerID(c.DataDir), Version: buildinfo.Version},
		Logger:    log.With("component", "tunnel"),
		OnMessage: router.onMessage,
		OnConnect: func(_ context.Context, ack tunnel.HelloAck) {
			log.Info("connected to proxy", "proxy", id.Proxy, "proxy_id", ack.ProxyID, "cluster", id.Cluster)
		},
	}
	s.uploader = NewUploader(spool, s.Tunnel, s.Tunnel.Connected, log.With("component", "upload"))
	relay := &EventRelay{Tunnel: s.Tunnel}
	s.relay = relay
	s.Handler = &Handler{
		Cluster: policy.Cluster{Name: id.Cluster, Labels: c.Labels}, GrantKey: id.GrantKey, Policy: pol, Scopes: pol,
		Upstream: upstream, Transport: rt, Upgrades: upgrades, Token: tokens.Token, TokenRefused: tokens.Refused, Impersonation: c.Impersonation,
		Locks: set, Sessions: s.Sessions,
		Events: relay.Send, Spool: spool, Recorded: func(recording.Item) { s.uploader.Kick() },
		RecordingMaxBytes: c.RecordingMaxBytes, Backlog: Backlog{Dir: backlog},
		Logger: log.With("component", "worker"), Now: time.Now,
	}
	s.Tunnel.Handler = s.Handler.ServeStream
	router.handleLocks(s.Tunnel, set, s.Sessions)
	router.handleConsole(s.Tunnel, s.Tunnel, spool, s.Sessions, pol)
	return s, nil
}

// Run connects to the proxy and serves until ctx ends, polling the policy
// and uploading recordings meanwhile. Then it drains (Server.drain) within
// the shutdown timeout before it closes the tunnel.
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	// The tunnel and the uploader outlive ctx by the drain.
	live, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	wg.Go(func() { _ = s.Policy.Run(ctx) })
	wg.Go(func() { _ = s.uploader.Run(live) })
	wg.Go(func() { s.relay.Run(live) })
	im := s.Handler.Impersonation
	s.log.Info("worker started", "cluster", s.Handler.Cluster.Name, "api_server", s.Handler.Upstream.String(),
		"policy", s.policySource, "kube_user_prefix", im.UserPrefix, "impersonation", cmp.Or(im.Mode, impersonate.ModeLegacy))
	tunnelDone := make(chan error, 1)
	go func() { tunnelDone <- s.Tunnel.Run(live) }()
	select {
	case err := <-tunnelDone:
		return err // misconfigured: it never ran
	case <-ctx.Done():
	}
	s.drain(s.shutdownTimeout, s.handover)
	stop()
	<-tunnelDone
	return ctx.Err()
}

// Close ends the worker's sessions and releases the policy; call it after
// Run returned.
func (s *Server) Close() {
	s.Sessions.Close()
	s.Policy.Close()
}

// backlogDir is DATA/streams, where streams keep the API server output
// they read ahead of their users (Backlog). Its files are unlinked as soon
// as they are created; any left by a crash are removed here.
func backlogDir(dataDir string) (string, error) {
	dir := filepath.Join(dataDir, backlogDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("stream backlog directory: %w; check that the worker can write its data directory", err)
	}
	stale, _ := filepath.Glob(filepath.Join(dir, "limen-backlog-*"))
	for _, f := range stale {
		_ = os.Remove(f)
	}
	return dir, nil
}

// workerID is stable across restarts of the same worker: its host name and
// data directory.
func workerID(dataDir string) string {
	host, _ := os.Hostname()
	sum := sha256.Sum256([]byte(dataDir))
	return host + "-" + hex.EncodeToString(sum[:4])
}
