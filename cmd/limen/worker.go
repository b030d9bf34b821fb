package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/impersonate"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/telemetry"
	"github.com/limenhq/limen/gateway/worker"
)

// workerConfig is the worker's typed configuration; keys are the flag names.
type workerConfig struct {
	Proxy     string
	Cluster   string
	JoinToken string
	DataDir   string
	// RecordingMaxBytes caps each exec and attach recording.
	RecordingMaxBytes int64
	// RecordingSpoolMaxBytes limits the spool of recordings waiting for upload.
	RecordingSpoolMaxBytes int64
	// ShutdownTimeout and Handover bound the drain on SIGTERM.
	ShutdownTimeout, Handover time.Duration
}

func newWorkerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a Limen worker next to one cluster: it serves that cluster's API through the proxy's tunnel",
		Long: `Run a Limen worker. On first start it exchanges --join-token (from
limen tokens create) for a worker certificate bound to --cluster, pinning the
proxy CA fingerprint the token carries, and stores the certificate, key, CA
and the proxy's grant-verification key in --data-dir/worker. Later starts use
the stored identity and need no token.

It then dials the proxy, keeps the tunnel up, and serves every request the
proxy sends: it verifies the grant, re-checks the groups against its own
policy, strips client identity headers, impersonates, forwards to
--kube-api-server with the ServiceAccount token in --kube-token-file, and
sends the audit event ahead of each response. The --kube-* flags default to
the in-cluster values.

Users are impersonated as --kube-user-prefix followed by their name, bots as
the prefix, "bot:" and their name, so no user takes a bot's Kubernetes name.
The prefix is empty by default; set one (such as "limen:") when the cluster
has users of its own whose names Limen users could share, or a RoleBinding
for "alice" applies to Limen's alice too.

--kube-impersonation names the worker RBAC the cluster grants (deploy/kube):
"legacy" (worker-rbac.yaml, the impersonate verb) or "constrained"
(worker-rbac-constrained.yaml, Kubernetes 1.36+, where the worker may act
only on the resources the operator lists). Constrained impersonation accepts
only domain-prefixed user-extra keys, so under it the session id travels as
the extra "` + impersonate.SessionExtraConstrained + `" instead of "` + impersonate.SessionExtraLegacy + `".`,
		Args: cobra.NoArgs,
		RunE: runWorker,
	}
	f := cmd.Flags()
	f.String("proxy", "", "proxy HOST:PORT (required)")
	f.String("kube-cluster", "", "the cluster this worker serves; must match the token (required)")
	f.String("join-token", "", "one-time join token, needed only until the worker is enrolled")
	f.String("data-dir", "", "directory for the worker's identity, its recording spool and its last good policy bundle (required)")
	f.Bool("enroll-only", false, "enroll (if needed) and exit without serving")
	f.String("recording-max-bytes", "1Gi", "cap on one exec or attach recording, in bytes (1073741824, 64Mi, 1Gi…); a session that reaches it is ended")
	addWorkerSpoolFlag(f)
	addShutdownFlags(f, worker.DefaultShutdownTimeout, true)
	addWorkerKubeFlags(f)
	addPolicyFlags(f)
	addDebugFlags(f)
	addTelemetryFlags(f)
	cmd.AddCommand(newWorkerStatusCmd())
	return cmd
}

func loadWorkerConfig(cmd *cobra.Command) (workerConfig, error) {
	v, err := loadConfig(cmd)
	if err != nil {
		return workerConfig{}, err
	}
	c := workerConfig{Proxy: v.GetString("proxy"), Cluster: v.GetString("kube-cluster"),
		JoinToken: v.GetString("join-token"), DataDir: v.GetString("data-dir")}
	switch {
	case c.DataDir == "":
		return c, errors.New("data-dir: required; set --data-dir or LIMEN_DATA_DIR")
	case c.Proxy == "":
		return c, errors.New("proxy: required; set --proxy HOST:PORT or LIMEN_PROXY")
	case c.Cluster == "":
		return c, errors.New("kube-cluster: required; set --kube-cluster NAME or LIMEN_KUBE_CLUSTER")
	}
	if c.RecordingMaxBytes, err = parseRecordingMaxBytes(v.GetString("recording-max-bytes")); err != nil {
		return c, err
	}
	if c.RecordingSpoolMaxBytes, err = loadWorkerSpool(v, c.RecordingMaxBytes); err != nil {
		return c, err
	}
	if c.ShutdownTimeout, err = shutdownTimeout(v); err != nil {
		return c, err
	}
	c.Handover, err = shutdownHandover(v, c.ShutdownTimeout)
	return c, err
}

// parseRecordingMaxBytes reads the recording-max-bytes setting: a byte
// count, plain or with a Kubernetes binary suffix (Ki, Mi, Gi, Ti).
func parseRecordingMaxBytes(s string) (int64, error) {
	q, err := resource.ParseQuantity(s)
	n, exact := q.AsInt64()
	if err != nil || !exact {
		return 0, fmt.Errorf("recording-max-bytes %q: want a whole number of bytes such as 1073741824, 512Mi or 1Gi", s)
	}
	if err := recording.CheckMaxBytes(n); err != nil {
		return 0, fmt.Errorf("recording-max-bytes %q: %w; set --recording-max-bytes or LIMEN_RECORDING_MAX_BYTES to %s or more",
			s, err, recording.FormatBytes(recording.MinMaxBytes))
	}
	return n, nil
}

// workerIdentity returns the stored identity, enrolling first when there is
// none (or it expired) and a token was given.
func workerIdentity(cmd *cobra.Command, c workerConfig) (*enroll.WorkerIdentity, error) {
	w, err := enroll.LoadWorkerIdentity(c.DataDir)
	if err == nil {
		if w.Cluster != c.Cluster {
			return nil, fmt.Errorf("cluster: %s is enrolled for cluster %s, not %s: use another --data-dir", c.DataDir, w.Cluster, c.Cluster)
		}
		if c.JoinToken != "" {
			fmt.Fprintln(cmd.ErrOrStderr(), "already enrolled: --join-token ignored")
		}
		return w, nil
	}
	if c.JoinToken == "" {
		return nil, fmt.Errorf("%w (%v)", err, "no --join-token given")
	}
	return enroll.Enroll(cmd.Context(), enroll.Options{Proxy: c.Proxy, Cluster: c.Cluster, Token: c.JoinToken, DataDir: c.DataDir})
}

func runWorker(cmd *cobra.Command, _ []string) error {
	c, err := loadWorkerConfig(cmd)
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
	if err := telemetryConfig(v, "limen-worker").Validate(); err != nil {
		return err
	}
	// Policy and impersonation settings are checked before enrolling: a
	// refused bundle URL or user prefix must not cost a one-time join token.
	popts, err := policyOptions(v, log)
	if err != nil {
		return err
	}
	im, err := loadWorkerImpersonation(v)
	if err != nil {
		return err
	}
	// So is the API server (an http:// URL above all), unless the worker
	// only enrolls, which needs none.
	var kc workerKubeConfig
	if !v.GetBool("enroll-only") {
		if kc, err = loadWorkerKubeConfig(v); err != nil {
			return err
		}
	}
	w, err := workerIdentity(cmd, c)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Worker for cluster %s enrolled with %s; certificate valid until %s.\n",
		w.Cluster, w.Proxy, w.NotAfter().Local().Format(time.RFC1123))
	if v.GetBool("enroll-only") {
		return nil
	}
	s, err := worker.New(cmd.Context(), worker.Config{
		Identity: w, DataDir: c.DataDir,
		APIServer: kc.APIServer, CAFile: kc.CAFile, TokenFile: kc.TokenFile, Labels: kc.Labels, Impersonation: im,
		Policy: popts, RecordingMaxBytes: c.RecordingMaxBytes, RecordingSpoolMaxBytes: c.RecordingSpoolMaxBytes,
		ShutdownTimeout: c.ShutdownTimeout, Handover: c.Handover, Logger: log,
	})
	if err != nil {
		return err
	}
	defer s.Close()
	tel, err := startTelemetry(cmd.Context(), v, "limen-worker", log)
	if err != nil {
		return err
	}
	defer stopTelemetry(tel, log)
	s.Handler.Tracer, s.Handler.Metrics = hooks(v, tel)
	s.Sessions.OnEnded(streamMetrics(tel.Metrics, telemetry.HopWorker))
	if err := serveMetrics(cmd.Context(), v, tel, workerProbes(s, c.DataDir, c.RecordingSpoolMaxBytes), log); err != nil {
		return err
	}
	if err := serveDebug(cmd.Context(), v, log); err != nil {
		return err
	}
	err = s.Run(cmd.Context())
	if cmd.Context().Err() != nil {
		return nil // stopped by a signal
	}
	return err
}

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
	f.String("kube-user-prefix", "", `prefix of every Kubernetes user name Limen impersonates, e.g. "limen:" (users PREFIX+NAME, bots PREFIX+"bot:"+NAME; not "system:…" or "bot:…"; the same on every worker of a cluster)`)
	f.String("kube-impersonation", string(impersonate.ModeLegacy), `worker RBAC the cluster grants: "legacy" (deploy/kube/worker-rbac.yaml) or "constrained" (worker-rbac-constrained.yaml, Kubernetes 1.36+)`)
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
	if _, err := worker.ParseAPIServer(c.APIServer); err != nil {
		return c, err
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

// loadWorkerImpersonation reads whom the worker impersonates at the
// cluster: the user prefix and the RBAC variant the cluster grants.
func loadWorkerImpersonation(v *viper.Viper) (impersonate.Config, error) {
	c := impersonate.Config{UserPrefix: v.GetString("kube-user-prefix")}
	if err := impersonate.ValidateUserPrefix(c.UserPrefix); err != nil {
		return c, fmt.Errorf("kube-user-prefix: %w; set --kube-user-prefix or LIMEN_KUBE_USER_PREFIX to a prefix such as \"limen:\", or leave it empty", err)
	}
	mode, err := impersonate.ParseMode(v.GetString("kube-impersonation"))
	if err != nil {
		return c, fmt.Errorf("kube-impersonation: %w; set --kube-impersonation or LIMEN_KUBE_IMPERSONATION", err)
	}
	c.Mode = mode
	return c, nil
}
