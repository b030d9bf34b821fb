package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/limenhq/limen/gateway/enroll"
)

// workerConfig is the worker's typed configuration; keys are the flag names.
type workerConfig struct {
	Proxy     string
	Cluster   string
	JoinToken string
	DataDir   string
}

func newWorkerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a Limen worker for one cluster (for now: enrollment only)",
		Long: `Run a Limen worker. On first start it exchanges --join-token (from
limen tokens create) for a worker certificate bound to --cluster, pinning the
proxy CA fingerprint the token carries, and stores the certificate, key, CA
and the proxy's grant-verification key in --data-dir/worker. Later starts use
the stored identity and need no token.`,
		Args: cobra.NoArgs,
		RunE: runWorker,
	}
	f := cmd.Flags()
	f.String("proxy", "", "proxy HOST:PORT (required)")
	f.String("cluster", "", "the cluster this worker serves; must match the token (required)")
	f.String("join-token", "", "one-time join token, needed only until the worker is enrolled")
	f.String("data-dir", "", "directory for the worker's identity (required)")
	return cmd
}

func loadWorkerConfig(cmd *cobra.Command) (workerConfig, error) {
	v, err := loadConfig(cmd)
	if err != nil {
		return workerConfig{}, err
	}
	c := workerConfig{Proxy: v.GetString("proxy"), Cluster: v.GetString("cluster"),
		JoinToken: v.GetString("join-token"), DataDir: v.GetString("data-dir")}
	switch {
	case c.DataDir == "":
		return c, errors.New("data-dir: required; set --data-dir or LIMEN_DATA_DIR")
	case c.Proxy == "":
		return c, errors.New("proxy: required; set --proxy HOST:PORT or LIMEN_PROXY")
	case c.Cluster == "":
		return c, errors.New("cluster: required; set --cluster NAME or LIMEN_CLUSTER")
	}
	return c, nil
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
	w, err := workerIdentity(cmd, c)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Worker for cluster %s enrolled with %s; certificate valid until %s.\n",
		w.Cluster, w.Proxy, w.NotAfter().Local().Format(time.RFC1123))
	return nil
}
