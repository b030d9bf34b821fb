package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/oidc"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/proxyproto"
	"github.com/limenhq/limen/gateway/telemetry"
	"github.com/limenhq/limen/gateway/tunnel"
)

// proxyConfig is the proxy's typed configuration; keys are the flag names.
type proxyConfig struct {
	Listen        string
	DataDir       string
	UserCertTTL   time.Duration
	WorkerCertTTL time.Duration
	CACert, CAKey string
	// CADir is the shared key material (root, issuers, grant key) of
	// several proxies, made by limen proxy keys init; "" keeps them in
	// DataDir/ca, generated on first start.
	CADir       string
	TLSCert     string
	TLSKey      string
	ServerNames []string
	// Clusters are the cluster names offered to policy for limen kube ls.
	Clusters []string
	// ClusterLabels are the labels policy sees for each cluster.
	ClusterLabels map[string]map[string]string
	// GrantTTL bounds each grant, and so each stream (exec, watch, …).
	GrantTTL time.Duration
	// Limits bound the TLS port.
	Limits proxy.Limits
	// ShutdownTimeout bounds the drain on SIGTERM.
	ShutdownTimeout time.Duration
	// Storage is the size limits of the audit database and recording store.
	Storage proxyStorage
	// OIDC and CIIssuers configure sign-in through an identity provider
	// and keyless bot logins (proxy_identity.go).
	OIDC      *oidc.ProviderConfig
	CIIssuers []proxy.CIIssuer
	// AuditExport is the audit export and retention (audit_export.go).
	AuditExport auditExportConfig
	// ConsoleOIDCRedirect is the console's OIDC callback (proxy_console.go).
	ConsoleOIDCRedirect string
	// PeerAddress is the host:port workers dial to reach this proxy
	// directly, besides their enrolled address (several proxies).
	PeerAddress string
	// Database is the shared store (database.go); zero: SQLite in DataDir.
	Database databaseConfig
	// LockView is how long the proxy trusts an unconfirmed lock view, and
	// what it does past it (database.go).
	LockView lockViewConfig
}

func newProxyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Run the Limen proxy: one TLS port for kubectl, the console, logins, the admin API and worker tunnels",
		Long: `Run the Limen proxy. On first start it creates its CA, TLS certificate and
grant-signing key in --data-dir (or reads the shared ones in --ca-dir) and
prints the CA fingerprint, which users pass to limen login --ca-fingerprint.

On one TLS port (--listen) it serves: the Kubernetes API of every cluster
whose worker is connected (https://HOST:PORT/k8s/CLUSTER/..., or the server
name CLUSTER.kube.HOST that limen kube login writes), where it authenticates
the client certificate, asks the policy for groups, audits the request
(kube.sent) and sends it with a signed grant through the worker's tunnel;
logins (password, OIDC, bots), worker enrollment and the admin API under
/v1/; the web console under /console/; and the tunnels workers dial in on.
It keeps the users, locks, audit trail and recordings (SQLite files in
--data-dir, or --database-url and --recording-store).

The first administrator is created on the proxy host, before or while the
proxy runs, by writing straight to the user store:

  limen users add alice --local --data-dir DIR --trait groups=admins

The default policy lets users with the trait groups=admins run every admin
command (data.limen.admin.allow).

The TLS port limits what a client gets before and without authenticating:
--tls-handshake-timeout and --read-header-timeout bound a slow client,
--max-conns-per-ip caps the connections of one address (worker tunnels
included), --idle-timeout closes idle connections, and --read-timeout and
--write-timeout bound every request but Kubernetes streams (watch, exec,
attach, logs -f, port-forward), which last as long as their grant. Refusals
of clients without a valid certificate are stored as one auth.denied per
address and kind per --denied-audit-interval, with a count, so that a flood
cannot fill the audit store.`,
		Args: cobra.NoArgs,
		RunE: runProxy,
	}
	f := cmd.Flags()
	f.String("listen", "127.0.0.1:8443", "address to serve HTTPS on")
	f.String("data-dir", "", "directory for the proxy's state (required): its CA and keys (unless --ca-dir), and, unless --database-url and --recording-store say otherwise, the users, bots, tokens, locks, audit trail and recordings")
	f.Duration("user-cert-ttl", ca.DefaultUserCertTTL, fmt.Sprintf("lifetime of user certificates (at most %s)", ca.MaxUserCertTTL))
	f.Duration("worker-cert-ttl", ca.DefaultWorkerCertTTL, "lifetime of worker certificates")
	f.String("ca-cert", "", "operator-provided root CA certificate (PEM); default: generated in --data-dir")
	f.String("ca-key", "", "key of --ca-cert (PEM)")
	f.String("ca-dir", "", "directory with the CA and grant-signing keys every proxy shares, made by limen proxy keys init (a mounted Secret; required with --database-url); default: generated in --data-dir")
	f.String("tls-cert", "", "operator-provided TLS serving certificate chain (PEM); default: issued by the CA. Routing by server name (limen kube login) needs the wildcard *.kube.NAME for each NAME clients dial")
	f.String("tls-key", "", "key of --tls-cert (PEM)")
	f.StringSlice("server-name", nil, "extra DNS name or IP for the generated serving certificate, which also covers *.kube.NAME for routing by server name (repeatable)")
	f.String("peer-address", "", "HOST:PORT at which workers reach this proxy directly, announced to every worker of every proxy sharing the store "+
		"so that each keeps a tunnel to each proxy (several proxies behind a load balancer; the serving certificate must carry the name workers enrolled with); "+
		"default: none, workers use only the address they enrolled with")
	f.StringSlice("clusters", nil, "cluster names offered to policy for limen kube ls")
	f.Duration("grant-ttl", proxy.DefaultGrantTTL, "longest life of a grant: a stream (exec, port-forward, watch) ends when its grant expires; never past the user's certificate")
	f.StringSlice("cluster-label", nil, "label the policy sees for a cluster, NAME:KEY=VALUE (repeatable; workers must agree)")
	lim := proxy.DefaultLimits()
	f.Duration("tls-handshake-timeout", lim.HandshakeTimeout, "longest TLS handshake, users and worker tunnels alike: the time a client has to authenticate")
	f.Duration("read-header-timeout", lim.ReadHeaderTimeout, "longest time to send a request's head")
	f.Duration("read-timeout", lim.ReadTimeout, "longest time to send a whole request, streams (watch, exec, logs -f, port-forward) excepted")
	f.Duration("write-timeout", lim.WriteTimeout, "longest time to answer a request, streams (watch, exec, logs -f, port-forward) excepted")
	f.Duration("idle-timeout", lim.IdleTimeout, "close a connection after this long with no request")
	f.Int("max-conns-per-ip", lim.MaxConnsPerIP, "most open connections from one client address, worker tunnels included; more are closed at once (and logged, at most every 10s)")
	f.StringSlice("proxy-protocol-from", nil, "addresses or CIDR prefixes of the TCP load balancers in front of the proxy that send a PROXY protocol v2 header "+
		"(HAProxy send-proxy-v2 with check-send-proxy, an AWS NLB with proxy protocol v2): a connection from one must start with the header, whose source "+
		"is then the client's address in the audit trail and for max-conns-per-ip; connections from elsewhere never have a header read (repeatable)")
	f.Duration("denied-audit-interval", lim.DeniedInterval, "refusals of clients without a valid certificate are stored as one auth.denied per address and kind per interval, with a count")
	addProxyStorageFlags(f)
	addAuditExportFlags(f)
	addDatabaseFlags(f)
	addShutdownFlags(f, proxy.DefaultShutdownTimeout, false)
	addIdentityFlags(f)
	addConsoleFlags(f)
	addPolicyFlags(f)
	addDebugFlags(f)
	addTelemetryFlags(f)
	cmd.AddCommand(newProxyStatusCmd(), newProxyKeysCmd())
	return cmd
}

func loadProxyConfig(cmd *cobra.Command) (proxyConfig, error) {
	v, err := loadConfig(cmd)
	if err != nil {
		return proxyConfig{}, err
	}
	c := proxyConfig{
		Listen: v.GetString("listen"), DataDir: v.GetString("data-dir"),
		UserCertTTL: v.GetDuration("user-cert-ttl"), WorkerCertTTL: v.GetDuration("worker-cert-ttl"),
		CACert: v.GetString("ca-cert"), CAKey: v.GetString("ca-key"), CADir: v.GetString("ca-dir"), TLSCert: v.GetString("tls-cert"), TLSKey: v.GetString("tls-key"),
		ServerNames: v.GetStringSlice("server-name"), Clusters: v.GetStringSlice("clusters"),
		GrantTTL: v.GetDuration("grant-ttl"), PeerAddress: v.GetString("peer-address"),
		Limits: proxy.Limits{
			HandshakeTimeout: v.GetDuration("tls-handshake-timeout"), ReadHeaderTimeout: v.GetDuration("read-header-timeout"),
			ReadTimeout: v.GetDuration("read-timeout"), WriteTimeout: v.GetDuration("write-timeout"),
			IdleTimeout: v.GetDuration("idle-timeout"), MaxConnsPerIP: v.GetInt("max-conns-per-ip"),
			DeniedInterval: v.GetDuration("denied-audit-interval"),
		},
	}
	if c.Limits.ProxyProtocolFrom, err = proxyproto.ParseTrusted(v.GetStringSlice("proxy-protocol-from")); err != nil {
		return c, fmt.Errorf("proxy-protocol-from: %w", err)
	}
	if c.ClusterLabels, err = parseClusterLabels(v.GetStringSlice("cluster-label")); err != nil {
		return c, err
	}
	if c.Storage, err = loadProxyStorage(v); err != nil {
		return c, err
	}
	if c.ShutdownTimeout, err = shutdownTimeout(v); err != nil {
		return c, err
	}
	if c.OIDC, c.CIIssuers, err = loadIdentity(v); err != nil {
		return c, err
	}
	if c.AuditExport, err = loadAuditExport(v); err != nil {
		return c, err
	}
	if c.ConsoleOIDCRedirect, err = loadConsoleRedirect(v, c.OIDC != nil); err != nil {
		return c, err
	}
	if c.Database, err = loadDatabaseConfig(v); err != nil {
		return c, err
	}
	if c.LockView, err = loadLockViewConfig(v); err != nil {
		return c, err
	}
	return c, c.validate()
}

func (c proxyConfig) validate() error {
	if c.DataDir == "" {
		return errors.New("data-dir: required; set --data-dir, LIMEN_DATA_DIR or data-dir in the config file")
	}
	if c.Database.URL != "" && c.CADir == "" {
		return errors.New("ca-dir: required with database-url: every proxy on one database must share one CA and grant key; " +
			"make them with limen proxy keys init --ca-dir DIR and mount DIR on every proxy (docs/KEYS.md)")
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("listen %q: want HOST:PORT, for example 127.0.0.1:8443", c.Listen)
	}
	if c.UserCertTTL < time.Minute || c.UserCertTTL > ca.MaxUserCertTTL {
		return fmt.Errorf("user-cert-ttl %s: must be between 1m and %s", c.UserCertTTL, ca.MaxUserCertTTL)
	}
	if c.GrantTTL < time.Second || c.GrantTTL > ca.MaxUserCertTTL {
		return fmt.Errorf("grant-ttl %s: must be between 1s and %s", c.GrantTTL, ca.MaxUserCertTTL)
	}
	if c.WorkerCertTTL < time.Hour {
		return fmt.Errorf("worker-cert-ttl %s: must be at least 1h", c.WorkerCertTTL)
	}
	if err := validateLimits(c.Limits); err != nil {
		return err
	}
	for _, n := range c.ServerNames {
		if net.ParseIP(n) == nil && !validDNSName(n) {
			return fmt.Errorf("server-name %q: want a DNS name (letters, digits, '-', '.') or an IP address", n)
		}
	}
	if c.PeerAddress != "" {
		if err := tunnel.ValidPeerAddr(c.PeerAddress); err != nil {
			return fmt.Errorf("peer-address: %w; want the HOST:PORT workers dial to reach this proxy, such as 10.0.0.5:8443", err)
		}
	}
	for _, n := range c.Clusters {
		if err := ca.ValidClusterName(n); err != nil {
			return fmt.Errorf("clusters: %w", err)
		}
	}
	return nil
}

func runProxy(cmd *cobra.Command, _ []string) error {
	c, err := loadProxyConfig(cmd)
	if err != nil {
		return err
	}
	v, err := loadConfig(cmd)
	if err != nil {
		return err
	}
	log, err := newLogger(cmd.ErrOrStderr(), v)
	if err != nil {
		return err
	}
	popts, err := policyOptions(v, log)
	if err != nil {
		return err
	}
	tel, err := startTelemetry(cmd.Context(), v, "limen-proxy", log)
	if err != nil {
		return err
	}
	defer stopTelemetry(tel, log)
	pc := c.gateway(popts, log)
	_, pc.Metrics = hooks(v, tel)
	if pc.Store, err = c.Database.backend(cmd.Context(), c.DataDir); err != nil {
		return err
	}
	log.Info("store", "engine", pc.Store.Engine())
	s, err := proxy.New(cmd.Context(), pc)
	if err != nil {
		pc.Store.Close()
		return err
	}
	defer s.Close()
	s.Kube.Tracer, s.Kube.Metrics = hooks(v, tel)
	s.Sessions.OnEnded(streamMetrics(tel.Metrics, telemetry.HopProxy))
	stopExport, err := startAuditExport(cmd.Context(), c.AuditExport, s, c.DataDir, tel.Meter, log)
	if err != nil {
		return err
	}
	defer stopExport() // before s.Close: the exports read the audit store
	if err := serveMetrics(cmd.Context(), v, tel, proxyProbes(s), log); err != nil {
		return err
	}
	if err := serveDebug(cmd.Context(), v, log); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Limen proxy listening on https://%s\nCA fingerprint: %s\n", ln.Addr(), s.CA.Fingerprint())
	log.Info("proxy started", "listen", ln.Addr().String(), "ca_fingerprint", s.CA.Fingerprint())
	return s.Serve(cmd.Context(), ln)
}

// gateway is the validated configuration as gateway/proxy takes it.
func (c proxyConfig) gateway(popts policy.Options, log *slog.Logger) proxy.Config {
	return proxy.Config{
		DataDir: c.DataDir,
		CA: ca.Options{CACertFile: c.CACert, CAKeyFile: c.CAKey, KeysDir: c.CADir, TLSCertFile: c.TLSCert, TLSKeyFile: c.TLSKey,
			ServerNames: c.ServerNames, UserCertTTL: c.UserCertTTL, WorkerCertTTL: c.WorkerCertTTL},
		Clusters: c.Clusters, ClusterLabels: c.ClusterLabels, GrantTTL: c.GrantTTL,
		Limits: c.Limits, ShutdownTimeout: c.ShutdownTimeout, AuditMaxBytes: c.Storage.AuditMaxBytes, RecordingStoreMaxBytes: c.Storage.RecordingStoreMaxBytes,
		RecordingStore: c.Storage.RecordingStore, RecordingRetention: c.Storage.RecordingRetention,
		Policy: popts, Logger: log, OIDC: c.OIDC, CIIssuers: c.CIIssuers, ConsoleOIDCRedirectURL: c.ConsoleOIDCRedirect, PeerAddress: c.PeerAddress,
		LockStaleAfter: c.LockView.StaleAfter, LockMode: c.LockView.Mode,
	}
}

// validateLimits checks the port's limits, naming the key of any that is
// out of range.
func validateLimits(l proxy.Limits) error {
	for _, d := range []struct {
		key      string
		v        time.Duration
		min, max time.Duration
	}{
		{"tls-handshake-timeout", l.HandshakeTimeout, time.Second, 5 * time.Minute},
		{"read-header-timeout", l.ReadHeaderTimeout, time.Second, 5 * time.Minute},
		{"read-timeout", l.ReadTimeout, time.Second, time.Hour},
		{"write-timeout", l.WriteTimeout, time.Second, time.Hour},
		{"idle-timeout", l.IdleTimeout, time.Second, 24 * time.Hour},
		{"denied-audit-interval", l.DeniedInterval, time.Second, 24 * time.Hour},
	} {
		if d.v < d.min || d.v > d.max {
			return fmt.Errorf("%s %s: must be between %s and %s", d.key, d.v, d.min, d.max)
		}
	}
	if l.ReadHeaderTimeout > l.ReadTimeout {
		return fmt.Errorf("read-header-timeout %s: must not exceed read-timeout %s, which bounds the whole request", l.ReadHeaderTimeout, l.ReadTimeout)
	}
	if l.MaxConnsPerIP < 1 || l.MaxConnsPerIP > 1<<20 {
		return fmt.Errorf("max-conns-per-ip %d: must be between 1 and %d", l.MaxConnsPerIP, 1<<20)
	}
	return nil
}

// parseClusterLabels reads NAME:KEY=VALUE settings into labels per cluster.
func parseClusterLabels(specs []string) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for _, s := range specs {
		name, kv, ok := strings.Cut(s, ":")
		k, v, ok2 := strings.Cut(kv, "=")
		if !ok || !ok2 || name == "" || k == "" {
			return nil, fmt.Errorf("cluster-label %q: want NAME:KEY=VALUE, for example prod:env=production", s)
		}
		if out[name] == nil {
			out[name] = map[string]string{}
		}
		out[name][k] = v
	}
	return out, nil
}

// validDNSName accepts host names made of 1–63-byte labels of letters,
// digits and inner hyphens.
func validDNSName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}
