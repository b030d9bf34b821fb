package proxy

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/limenhq/limen/gateway/adminapi"
	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/bots"
	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/kpath"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/oidc"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/gateway/requests"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/store"
	"github.com/limenhq/limen/gateway/store/sqlite"
	"github.com/limenhq/limen/gateway/telemetry"
	"github.com/limenhq/limen/gateway/tunnel"
	"github.com/limenhq/limen/gateway/users"
)

// Config is everything the proxy needs to build itself. cmd/limen fills it
// from flags, the environment and the config file, and validates it with
// errors that name the keys; New checks only what it must to build.
type Config struct {
	// DataDir holds the CA, the recordings, by default the policy's last
	// good bundle and, unless Store is set, the stores (users, bots,
	// tokens, audit, locks) as SQLite files.
	DataDir string
	// Store is where users, bots, tokens, locks and the audit trail are
	// kept (gateway/store: the shared PostgreSQL database of several
	// proxies); nil means SQLite files in DataDir. The Server closes it.
	Store store.Backend
	// CA configures the certificate authority; its DataDir and Logger are
	// filled from the Config.
	CA ca.Options
	// Clusters are the cluster names offered to policy for limen kube ls;
	// ClusterLabels are the labels the policy sees for each cluster. Both
	// name the clusters the metrics label by name (Kube.KnownCluster).
	Clusters      []string
	ClusterLabels map[string]map[string]string
	// GrantTTL bounds each grant, and so each stream; 0 is DefaultGrantTTL.
	GrantTTL time.Duration
	// AuditMaxBytes limits the audit database (0: audit.DefaultMaxBytes);
	// when it is full, requests are refused. RecordingStoreMaxBytes limits
	// the recording store (0: recstore.DefaultMaxBytes); when it is full,
	// uploads are refused and recordings stay in the workers' spools.
	AuditMaxBytes, RecordingStoreMaxBytes int64
	// RecordingStore is the recording store's URL (recstore.OpenURL):
	// file:///DIR or s3://BUCKET?…; empty is the directory in DataDir.
	// RecordingStoreMaxBytes applies to a directory only.
	RecordingStore string
	// RecordingRetention, above 0, deletes recordings older than this
	// (recstore.Retention); 0 keeps them forever. RecordingRetentionEvery
	// is the time between runs (0: recstore's default).
	RecordingRetention, RecordingRetentionEvery time.Duration
	// Policy is where the policy comes from (the embedded default when
	// empty).
	Policy policy.Options
	// Limits bound the TLS port; zero fields take DefaultLimits'.
	Limits Limits
	// ShutdownTimeout bounds the drain once Serve's context ends (SIGTERM);
	// 0 is DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// ProxyID names this proxy process among those of one database (its
	// tunnels, its refusals of policy bundles, its sessions in the
	// directory); "" is the host name (the pod's name under Kubernetes)
	// with a random suffix, since two processes may share a host and a
	// restarted proxy is not the one that died.
	ProxyID string
	// LockStaleAfter bounds how long the proxy trusts a lock view it could
	// not confirm against the store (0: locks.DefaultStaleAfter); LockMode
	// says what it does past it ("": locks.ModeStrict).
	LockStaleAfter time.Duration
	LockMode       locks.Mode
	// Now is the clock of the caller checks (certificate expiry, locks,
	// grants); nil means time.Now. For tests.
	Now    func() time.Time
	Logger *slog.Logger
	// Metrics counts logins (and, set on Kube, requests); nil counts
	// nothing.
	Metrics *telemetry.Metrics
	// OIDC, when set, signs people in through an OpenID Connect provider;
	// CIIssuers are the CI systems whose workload tokens may log bots in
	// (identity.go).
	OIDC      *oidc.ProviderConfig
	CIIssuers []CIIssuer
	// ConsoleOIDCRedirectURL is the console's OIDC callback as registered
	// at the provider (https://PROXY/console/oidc/callback); the console
	// offers sign-in through OIDC only when it is set, and never derives
	// it from a request's Host.
	ConsoleOIDCRedirectURL string
	// Peers is where the proxies that share a store find each other
	// (peers.go); nil is this proxy alone. PeerAddress is the host:port
	// workers dial to reach this proxy directly ("" advertises none: workers
	// reach it only through their enrolled address). PeerHeartbeat and
	// PeerTTL are how often the proxy beats and how long a beat keeps a proxy
	// live (0: tunnel.DefaultPeerHeartbeat, tunnel.DefaultPeerTTL).
	Peers                  tunnel.Peers
	PeerAddress            string
	PeerHeartbeat, PeerTTL time.Duration
}

func (c Config) now() func() time.Time {
	if c.Now != nil {
		return c.Now
	}
	return time.Now
}

// Server is the assembled proxy: its CA and stores, the policy, the worker
// tunnels and every HTTP route. Build it with New, run it with Serve, and
// Close it when Serve returned.
type Server struct {
	CA     *ca.Authority
	Users  *users.Store
	Tokens *enroll.TokenStore
	Policy *policy.Engine
	Tunnel *tunnel.Server
	Audit  *audit.Store
	// Denials is Audit behind the aggregation of unauthenticated clients'
	// refusals (audit.Aggregator); every route audits through it.
	Denials *audit.Aggregator
	// Mux serves every route but /k8s/ (Kube); a caller may add routes
	// before Serve.
	Mux  *http.ServeMux
	Kube *Kube
	// Locks is the lock store; LockSet the locks in force, which every
	// request is checked against; Sessions the live-session registry whose
	// watchdog ends streams.
	Locks    *locks.Store
	LockSet  *locks.Set
	Sessions *sessions.Registry
	// Bots is the bot directory; OIDC the sign-in provider (nil when not
	// configured), which the console uses for its own sign-in.
	Bots *bots.Store
	OIDC *oidc.Provider
	// Requests are the access requests (requests.go).
	Requests *requests.Service
	ci       []authapi.CIIssuer

	recordings *recstore.Store
	retention  *recstore.Retention
	// store is the backend the stores above are opened from; tokenDB the
	// token driver, until the token store takes it.
	store   store.Backend
	tokenDB store.Tokens
	// sessionDir records the registry's sessions for the other proxies.
	sessionDir *sessions.Directory
	// lockViewStale is what checkLockView saw last (syncLocks' goroutine).
	lockViewStale bool
	control       *workerRouter
	peers         *tunnel.Announcer
	ready         []readyCheck
	admin         *adminapi.Handler
	limits        Limits
	shutdown      time.Duration
	metrics       *telemetry.Metrics
	log           *slog.Logger
}

// New opens the data directory and builds the proxy: CA, stores, policy,
// the tunnel server with its control-stream handlers, /k8s/, the identity
// API under /v1/ and the admin API. It starts nothing; Serve does.
func New(ctx context.Context, c Config) (_ *Server, err error) {
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	if c.DataDir == "" {
		return nil, errors.New("proxy: DataDir is required")
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data-dir: %w", err)
	}
	caOpts := c.CA
	caOpts.DataDir, caOpts.Logger = c.DataDir, log
	authority, err := ca.Open(caOpts)
	if err != nil {
		return nil, err
	}
	backend := c.Store
	if backend == nil {
		backend = sqlite.New(c.DataDir)
	}
	popts := c.Policy
	if popts.Logger == nil {
		popts.Logger = log
	}
	if popts.Shared, err = backend.Policy(ctx); err != nil {
		backend.Close()
		return nil, fmt.Errorf("policy floor: %w", err)
	}
	proxyID := c.ProxyID
	if proxyID == "" {
		proxyID = newProxyID()
	}
	if popts.ProxyID == "" {
		popts.ProxyID = proxyID
	}
	pol, err := policy.New(ctx, popts)
	if err != nil {
		backend.Close()
		return nil, fmt.Errorf("policy: %w", err)
	}
	s := &Server{CA: authority, Policy: pol, Mux: http.NewServeMux(), log: log, control: newWorkerRouter(log), metrics: c.Metrics,
		store: backend}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	s.Tunnel = &tunnel.Server{Logger: log.With("component", "tunnel"),
		OnMessage: s.control.onMessage, OnConnect: s.control.onConnect, OnStream: s.control.onStream}
	if err := s.openStores(ctx, c); err != nil {
		return nil, err
	}
	s.limits, s.shutdown = c.Limits.orDefault(), c.ShutdownTimeout
	s.Denials = audit.NewAggregator(s.Audit, audit.AggregatorOptions{Interval: s.limits.DeniedInterval,
		Logger: log.With("component", "audit")})
	if s.Tokens, err = enroll.NewTokenStore(s.tokenDB, enroll.TokenStoreOptions{Audit: s.Denials}); err != nil {
		return nil, err
	}
	if s.recordings, err = recstore.OpenURL(ctx, c.RecordingStore, recstore.URLOptions{DataDir: c.DataDir, MaxBytes: c.RecordingStoreMaxBytes}); err != nil {
		return nil, err
	}
	if c.RecordingRetention > 0 {
		s.retention = &recstore.Retention{Store: s.recordings, Keep: c.RecordingRetention, Every: c.RecordingRetentionEvery,
			Audit: s.Audit, Logger: log.With("component", "recordings")}
	}
	if err := s.openLocks(ctx, c, proxyID); err != nil {
		return nil, err
	}
	if err := s.openIdentity(ctx, c); err != nil {
		return nil, err
	}
	s.Kube = s.newKube(c)
	s.Mux.Handle("/", http.HandlerFunc(notRouted))
	s.Mux.Handle("GET "+PathAccess, s.Kube.AccessHandler(s.Kube.Authenticate))
	s.handleControl()
	if err := s.newAnnouncer(c, proxyID); err != nil {
		return nil, err
	}
	s.handleHealth()
	if err := s.mountAPIs(c); err != nil {
		return nil, err
	}
	if err := s.openRequests(ctx, c); err != nil {
		return nil, err
	}
	if err := s.mountConsole(c); err != nil {
		return nil, err
	}
	return s, nil
}

// openStores opens the audit trail and the user directory from the store
// backend, and the token driver New builds the token store on.
func (s *Server) openStores(ctx context.Context, c Config) error {
	adb, err := s.store.Audit(ctx, false)
	if err != nil {
		return fmt.Errorf("audit store: %w", err)
	}
	if s.Audit, err = audit.New(ctx, adb, audit.Options{MaxBytes: c.AuditMaxBytes, Logger: s.log,
		OnCommit: func(d time.Duration) { c.Metrics.AuditCommit(context.Background(), d) }}); err != nil {
		adb.Close()
		return fmt.Errorf("audit store: %w", err)
	}
	udb, err := s.store.Users(ctx)
	if err != nil {
		return err
	}
	if s.Users, err = users.New(udb, users.Options{}); err != nil {
		udb.Close()
		return err
	}
	if s.tokenDB, err = s.store.Tokens(ctx); err != nil {
		return err
	}
	return nil
}

// openLocks opens the lock store, loads the locks in force, and starts the
// session registry that ends a locked user's streams.
func (s *Server) openLocks(ctx context.Context, c Config, proxyID string) error {
	ldb, err := s.store.Locks(ctx)
	if err != nil {
		return fmt.Errorf("lock store: %w", err)
	}
	s.Locks, s.LockSet = locks.New(ldb), locks.NewSet()
	all, err := s.Locks.List(ctx, time.Now())
	if err != nil {
		return fmt.Errorf("lock store: %w", err)
	}
	s.LockSet.Replace(all)
	s.LockSet.Guard(cmp.Or(c.LockStaleAfter, locks.DefaultStaleAfter), cmp.Or(c.LockMode, locks.ModeStrict))
	s.readyCheck("locks", func(context.Context) error {
		if s.LockSet.Mode() == locks.ModeBestEffort {
			return nil
		}
		return s.LockSet.Stale(time.Now())
	})
	// The worker reports each session's one session.end; the proxy's end
	// reason joins it there (Kube.SessionEvent).
	// Every registered session is recorded in the directory too, so that
	// the consoles of the other proxies on one database list it.
	sdb, err := s.store.Sessions(ctx)
	if err != nil {
		return fmt.Errorf("session directory: %w", err)
	}
	s.sessionDir = sessions.NewDirectory(sdb, proxyID, s.log.With("component", "sessions"))
	s.Sessions = sessions.New(sessions.Config{Locks: s.LockSet, Logger: s.log.With("component", "sessions"), OnStart: s.sessionDir.Record})
	s.Sessions.OnEnded(s.sessionDir.Record)
	return nil
}

// newKube builds the /k8s/ route: authenticate, decide, grant, tunnel.
func (s *Server) newKube(c Config) *Kube {
	return &Kube{
		Authenticate: func(r *http.Request) (identity.Principal, time.Time, error) {
			p, err := s.CA.PrincipalFromRequest(r)
			if err != nil {
				return p, time.Time{}, err
			}
			return p, r.TLS.PeerCertificates[0].NotAfter, nil
		},
		Policy:       s.Policy,
		Tunnel:       s.Tunnel,
		Audit:        s.Denials,
		AuditRoom:    s.Audit.Room,
		Starts:       s.Audit,
		GrantKey:     s.CA.GrantSigningKey(),
		Locks:        s.LockSet,
		Sessions:     s.Sessions,
		Clusters:     func(name string) policy.Cluster { return policy.Cluster{Name: name, Labels: c.ClusterLabels[name]} },
		KnownCluster: knownClusters(c, s.Tunnel.Connected),
		ProxyNames:   clusterServerSuffixes(s.CA.ServingCertificate()),
		GrantTTL:     c.GrantTTL,
		Logger:       s.log.With("component", "kube"),
		Now:          c.now(),
	}
}

// knownClusters is Kube.KnownCluster: the clusters named by --clusters or
// --cluster-label, and those a connected worker serves (workers enrol only
// through an administrator's join token, so these too are bounded).
func knownClusters(c Config, connected func(string) bool) func(string) bool {
	configured := make(map[string]bool, len(c.Clusters)+len(c.ClusterLabels))
	for _, n := range c.Clusters {
		configured[n] = true
	}
	for n := range c.ClusterLabels {
		configured[n] = true
	}
	return func(name string) bool { return configured[name] || connected(name) }
}

// clusterServerSuffixes are the proxy names NAME for which the serving
// certificate holds the wildcard "*.kube.NAME" (kpath.ServerName): the
// generated certificate has one for each of its names; an operator's
// certificate routes by server name only for the wildcards it carries.
// Taking them from the certificate keeps routing and what clients can
// verify the same list.
func clusterServerSuffixes(c tls.Certificate) []string {
	leaf := c.Leaf
	if leaf == nil && len(c.Certificate) > 0 {
		leaf, _ = x509.ParseCertificate(c.Certificate[0])
	}
	if leaf == nil {
		return nil
	}
	var out []string
	for _, n := range leaf.DNSNames {
		if suffix, ok := strings.CutPrefix(strings.ToLower(n), "*."+kpath.ServerNameLabel+"."); ok && suffix != "" {
			out = append(out, suffix)
		}
	}
	return out
}

// notRouted answers a request on the proxy's own name that no route serves:
// most often kubectl get --raw or kubectl proxy with a kubeconfig whose
// server URL carried the cluster in its path, which they drop. A Status,
// so kubectl prints why instead of a bare 404.
func notRouted(w http.ResponseWriter, r *http.Request) {
	writeStatus(w, http.StatusNotFound, fmt.Sprintf("Limen has no route for %s: Kubernetes requests go to /k8s/CLUSTER/... "+
		"or to the server name CLUSTER.kube.PROXY; kubectl get --raw and kubectl proxy drop the server URL's path, "+
		"so run limen kube login CLUSTER for a kubeconfig that names the cluster by server name", audit.RequestPath(r.RequestURI)))
}

// clientRegistry answers authapi's question from the active policy.
type clientRegistry struct{ engine *policy.Engine }

func (c clientRegistry) Registered(_ context.Context, client string) (bool, error) {
	_, ok, _, err := c.engine.Scope(client)
	return ok, err
}

// mountAPIs mounts the identity API under /v1/ and the admin API, whose lock
// changes and kills are pushed to the workers.
func (s *Server) mountAPIs(c Config) error {
	api, err := authapi.New(authapi.Config{CA: s.CA, Users: s.Users, Tokens: s.Tokens, Admin: s.Policy,
		Clusters: configuredClusters{engine: s.Policy, names: c.Clusters, labels: c.ClusterLabels}, Workers: s.Tunnel,
		Audit: s.Denials, Locks: s.LockSet, Now: c.Now, Logger: s.log, ClientRegistry: clientRegistry{s.Policy},
		OnLogin: func(result string) { c.Metrics.Login(context.Background(), "password", result) },
		OIDC:    s.OIDC, Bots: s.Bots, CI: s.ci, BotPolicy: s.Policy, Replay: s.replays()})
	if err != nil {
		return err
	}
	s.Mux.Handle("/v1/", api)
	admin, err := adminapi.New(adminapi.Config{
		LockStore: s.Locks, Locks: s.LockSet, Sessions: s.sessionView(), Admin: s.Policy, Principal: s.CA.PrincipalFromRequest,
		Audit: s.Denials, Now: c.Now, Logger: s.log.With("component", "admin"),
		OnChange: func(ctx context.Context, ch locks.Change) {
			s.LockSet.Apply(ch)
			s.endRequestsOnLock(ctx, ch)
			s.push(ctx, "", func() (tunnel.Message, error) { return locks.ChangeMessage(ch) }, locks.CheckAck)
		},
		OnKill: func(ctx context.Context, info sessions.Info, by identity.Principal) {
			s.pushKill(ctx, info, by.String())
		},
		RemoteKill: s.remoteKill,
	})
	if err != nil {
		return err
	}
	admin.Register(s.Mux)
	s.admin = admin
	return nil
}

// replays is where keyless logins remember the CI tokens used: the shared
// database's ledger when there is one, so that a token logs in once in the
// whole deployment; this proxy's memory otherwise.
func (s *Server) replays() bots.Replays {
	if l, ok := s.store.(store.ReplayLedger); ok {
		return bots.SharedReplays{Ledger: l}
	}
	return bots.NewReplayCache(0)
}

// syncLocks picks up, every adminapi.LockSyncInterval, the lock changes
// made to the store outside the admin API — the break-glass `limen unlock
// --local` on this host — and pushes them to the workers.
func (s *Server) syncLocks(ctx context.Context) {
	t := time.NewTicker(adminapi.LockSyncInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.admin.SyncLocks(ctx); err != nil && ctx.Err() == nil {
				s.log.Error("lock store unreadable; locks in force unchanged", "err", err)
			}
			s.checkLockView()
		}
	}
}

// checkLockView acts when the lock view turns stale or fresh again: in
// strict mode a stale view refuses every request (locks.Set.Check) and
// here ends every stream, since a lock set through another proxy may not
// have reached this one; in best-effort mode the proxy only says so.
func (s *Server) checkLockView() {
	err := s.LockSet.Stale(time.Now())
	was := s.lockViewStale
	s.lockViewStale = err != nil
	switch {
	case err == nil && was:
		s.log.Info("lock view confirmed again; serving")
	case err != nil && !was && s.LockSet.Mode() == locks.ModeBestEffort:
		s.log.Warn("lock view stale; serving on the last one (lock-mode best-effort): a lock set through another proxy may not be in force here", "err", err)
	case err != nil && !was:
		n := s.Sessions.EndAll(sessions.ReasonLockViewStale)
		s.log.Error("lock view stale: refusing requests and ending streams (lock-mode strict)", "streams_ended", n, "err", err)
	}
}

// watchLocks puts a lock change made through another proxy in force here
// as soon as the store announces it, and re-reads every lock whenever the
// feed (re)connects; syncLocks' polling stays the floor under it.
func (s *Server) watchLocks(ctx context.Context, feed store.Feed) {
	sync := func() {
		if err := s.admin.SyncLocks(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("lock store unreadable; locks in force unchanged", "err", err)
		}
	}
	_ = feed.Watch(ctx, store.LocksChannel, sync, func(string) { sync() })
}

// Serve runs the policy poller and the one TLS port — worker tunnels,
// HTTP/2 and HTTP/1.1, told apart by ALPN — until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { _ = s.Policy.Run(ctx) })
	wg.Go(func() { s.syncLocks(ctx) })
	if s.retention != nil {
		wg.Go(func() { s.retention.Run(ctx) })
	}
	wg.Go(func() { s.peers.Run(ctx) })
	wg.Go(func() { s.Requests.Sweep(ctx, RequestSweepInterval) })
	if feed, ok := s.store.(store.Feed); ok {
		wg.Go(func() { s.watchLocks(ctx, feed) })
		wg.Go(func() { s.watchKills(ctx, feed) })
	}
	p := &port{TLS: s.CA.ServerTLSConfig(), Kube: s.Kube, ServerCluster: s.Kube.ServerCluster, Handler: s.Mux, Tunnel: s.Tunnel, Limits: s.limits,
		WorkerCluster: s.CA.ClusterFromChains, ShutdownTimeout: s.shutdown, EndSessions: s.endSessions, Logger: s.log}
	return p.Serve(ctx, ln)
}

// Store is the proxy's store backend (SQLite files, or the shared
// database), for what runs beside the proxy (the audit export's leases).
func (s *Server) Store() store.Backend { return s.store }

// Close releases the stores; call it after Serve returned.
func (s *Server) Close() {
	if s.Users != nil {
		s.Users.Close()
	}
	if s.Tokens != nil {
		s.Tokens.Close()
	}
	if s.Bots != nil {
		s.Bots.Close()
	}
	if s.Sessions != nil {
		s.Sessions.Close()
	}
	if s.sessionDir != nil {
		s.sessionDir.Close() // after the registry: its ends are recorded
	}
	if s.Locks != nil {
		s.Locks.Close()
	}
	if s.Denials != nil {
		s.Denials.Close() // stores the refusals it still counts
	}
	if s.Audit != nil {
		s.Audit.Close()
	}
	if s.Policy != nil {
		s.Policy.Close()
	}
	if s.recordings != nil {
		_ = s.recordings.Close()
	}
	if s.tokenDB != nil && s.Tokens == nil {
		s.tokenDB.Close()
	}
	if s.store != nil {
		s.store.Close()
	}
}

// configuredClusters asks policy which of the configured clusters a
// principal may reach.
type configuredClusters struct {
	engine *policy.Engine
	names  []string
	labels map[string]map[string]string
}

func (c configuredClusters) Clusters(ctx context.Context, p identity.Principal) ([]string, error) {
	cands := make([]policy.Cluster, 0, len(c.names))
	for _, n := range c.names {
		cands = append(cands, policy.Cluster{Name: n, Labels: c.labels[n]})
	}
	return c.engine.Clusters(ctx, p, cands)
}
