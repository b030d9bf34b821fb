package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/limenhq/limen/gateway/doctor"
	"github.com/limenhq/limen/gateway/worker"
)

func newDoctorCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check your setup (or, with proxy / worker, an operator's host) and say what is wrong and what to do",
		Long: `doctor runs a list of checks and prints one line for each: ok, warn or
FAIL, what it found and, after "->", what to do. It exits non-zero when a
check failed; "skip" marks a check that could not run because one before it
failed. --json prints the same as JSON.

Without a subcommand it checks a user's setup, with the profile of the last
login (or --proxy):
  proxy        the proxy is reachable and its certificate trusted (unreachable,
               untrusted and a name mismatch are told apart)
  clock        the skew between this machine and the proxy (from its Date
               header): warn above 30s, FAIL above 1m, the margin the proxy's
               CA backdates certificates by
  certificate  your certificate is valid, and how long it has left (warn
               under 15m)
  cluster      each cluster policy lets you reach, and whether a worker is
               connected for it (warn when none is: requests get 503)
  kubeconfig   every kubeconfig user whose credential is the limen plugin, in
               the profile's kubeconfigs and KUBECONFIG (or ~/.kube/config):
               its command resolves to an executable

On an operator's host, "limen doctor proxy" and "limen doctor worker" read the
process's data directory; they take the same keys as limen proxy and limen
worker, so --config can name the same file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := commandProfile(cmd)
			if err != nil {
				return err
			}
			r := doctor.User(cmd.Context(), doctor.UserOptions{Profile: p, Kubeconfigs: doctor.DefaultKubeconfigs()})
			return writeReport(cmd, r)
		},
	}
	cmd.PersistentFlags().Bool("json", false, "print the checks as JSON")
	cmd.Flags().String("proxy", "", "proxy HOST:PORT (default: the last one logged in to)")
	cmd.AddCommand(newDoctorProxyCmd(), newDoctorWorkerCmd())
	return cmd
}

func newDoctorProxyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Check the proxy's host: policy bundle, audit database, recording store",
		Long: `Check, beside a running proxy and from its --data-dir:
  policy      the active bundle and the bundle service's last error (FAIL when
              no bundle is active: every request gets 503)
  audit       the audit database opens and answers, and its use of
              audit-max-bytes (warn from 80%, FAIL when full: every request is
              refused)
  recordings  the recording store's use of recording-store-max-bytes (FAIL
              when full: uploads are refused)
Pass the proxy's limits, or its --config.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, dir, limits, err := proxyHostConfig(cmd)
			if err != nil {
				return err
			}
			o := doctor.ProxyOptions{DataDir: dir, PolicyDir: policyPersistDir(v),
				AuditMaxBytes: limits.AuditMaxBytes, RecordingStoreMaxBytes: limits.RecordingStoreMaxBytes,
				RecordingStore: limits.RecordingStore}
			dbc, err := loadDatabaseConfig(v)
			if err != nil {
				return err
			}
			if dbc.URL != "" {
				b, err := dbc.backend(cmd.Context(), dir)
				if err != nil {
					return err
				}
				defer b.Close()
				o.Store = b
			}
			return writeReport(cmd, doctor.Proxy(cmd.Context(), o))
		},
	}
	f := cmd.Flags()
	f.String("data-dir", "", "the proxy's data directory")
	f.String("policy-persist-dir", "", "the proxy's policy directory (default: <data-dir>/policy)")
	addProxyStorageFlags(f)
	addDatabaseFlags(f)
	return cmd
}

func newDoctorWorkerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Check a worker's host: enrollment, tunnel, clock, policy, spool, token, API server",
		Long: `Check, beside a running worker and from its --data-dir:
  identity    the worker is enrolled, and how long its certificate has left
              (warn under 14 days)
  tunnel      the proxy is reachable, trusted by the CA pinned at enrollment,
              and accepts the worker certificate. The worker keeps no record
              of its connection: this dials the proxy as the worker does;
              whether the running worker is connected now shows in
              limen kube ls and the proxy's limen_tunnel_workers metric
  clock       the skew between this host and the proxy: warn above 10s, FAIL
              above 30s, past which the worker refuses grants as not yet valid
  policy      the active bundle and the bundle service's last error
  spool       the recording spool's use of recording-spool-max-bytes and its
              backlog (warn when a recording waits over 10m: uploads are stuck)
  token       the ServiceAccount token in --kube-token-file and its expiry,
              read from the JWT without verifying it
  api server  GET /readyz with the worker's CA and token: reachable, trusted,
              token accepted, ready
Pass the worker's --kube-* settings and limits, or its --config.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			o, err := doctorWorkerOptions(v)
			if err != nil {
				return err
			}
			return writeReport(cmd, doctor.Worker(cmd.Context(), o))
		},
	}
	f := cmd.Flags()
	f.String("data-dir", "", "the worker's data directory")
	f.String("policy-persist-dir", "", "the worker's policy directory (default: <data-dir>/policy)")
	addWorkerSpoolFlag(f)
	addWorkerKubeFlags(f)
	return cmd
}

// doctorWorkerOptions reads the worker's settings the checks need.
func doctorWorkerOptions(v *viper.Viper) (doctor.WorkerOptions, error) {
	dir, err := statusDataDir(v, "worker")
	if err != nil {
		return doctor.WorkerOptions{}, err
	}
	limit, err := loadWorkerSpool(v, 0)
	if err != nil {
		return doctor.WorkerOptions{}, err
	}
	kc, err := loadWorkerKubeConfig(v)
	if err != nil {
		return doctor.WorkerOptions{}, err
	}
	return doctor.WorkerOptions{DataDir: dir, PolicyDir: policyPersistDir(v), SpoolMaxBytes: limit,
		SpoolLag: oldestCast(worker.SpoolDir(dir)), APIServer: kc.APIServer, CAFile: kc.CAFile, TokenFile: kc.TokenFile}, nil
}

// errChecksFailed makes `limen doctor` exit non-zero once it has printed
// its report.
var errChecksFailed = errors.New("checks failed")

func writeReport(cmd *cobra.Command, r doctor.Report) error {
	asJSON, _ := cmd.Flags().GetBool("json")
	var err error
	if asJSON {
		err = r.WriteJSON(cmd.OutOrStdout())
	} else {
		err = r.Write(cmd.OutOrStdout())
	}
	if err != nil {
		return err
	}
	if n := r.Failed(); n > 0 {
		return fmt.Errorf("%w: %d of %d; each FAIL line says what to do", errChecksFailed, n, len(r))
	}
	return nil
}
