package main

import (
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/recstore"
)

// newRecordingsCmd is `limen recordings`, reading the proxy's recording
// store on the proxy host.
func newRecordingsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "recordings",
		Short: "List recorded exec and attach sessions (from the proxy's recording store)",
		Long: `Read the recordings of exec and attach sessions that the workers uploaded
to the proxy's recording store. Play one with limen play SESSION.`,
	}
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the recordings in the proxy's store (on the proxy host, or anywhere with --recording-store)",
		Long: `List the exec and attach recordings the workers uploaded, oldest first:
session, cluster, when it was stored, size and SHA-256. The store is read
directly: from --data-dir (the proxy's data directory) on the proxy host,
alongside a running proxy, or from --recording-store (a bucket) wherever
its credentials are. Play one with limen play SESSION.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := openRecordingStore(cmd)
			if err != nil {
				return err
			}
			defer st.Close()
			all, err := st.List()
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SESSION\tCLUSTER\tSTORED\tBYTES\tSHA256")
			for _, r := range all {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", r.ID, r.Cluster, r.Time.UTC().Format(time.RFC3339), r.Size, r.SHA256)
			}
			return tw.Flush()
		},
	}
	ls.Flags().String("data-dir", "", "the proxy's data directory")
	addRecordingStoreFlag(ls.Flags())
	cmd.AddCommand(ls)
	return cmd
}

// newPlayCmd is `limen play SESSION`.
func newPlayCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "play SESSION",
		Short: "Play a recorded exec or attach session in the terminal (on the proxy host, or anywhere with --recording-store)",
		Long: `Play the recording of an exec or attach session with its original timing.
The recording is read directly from the proxy's store, --data-dir (the
proxy's data directory, on the proxy host) or --recording-store (a bucket,
from wherever its credentials are), and checked against the SHA-256 the proxy
verified when it stored it. Find sessions with limen recordings ls or
limen audit search --type session.end.

  limen play 3f2a… --data-dir /var/lib/limen --speed 2 --max-idle 2s`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			speed := v.GetFloat64("speed")
			if speed <= 0 {
				return fmt.Errorf("speed %v: must be above 0, for example 2 for twice as fast", speed)
			}
			st, err := openRecordingStore(cmd)
			if err != nil {
				return err
			}
			defer st.Close()
			r, _, err := st.Open(args[0])
			if errors.Is(err, recstore.ErrNotFound) {
				return fmt.Errorf("no recording for session %s; list them with limen recordings ls", args[0])
			}
			if err != nil {
				return err
			}
			defer r.Close()
			return recording.Play(cmd.Context(), r, cmd.OutOrStdout(), speed, v.GetDuration("max-idle"))
		},
	}
	f := cmd.Flags()
	f.String("data-dir", "", "the proxy's data directory")
	addRecordingStoreFlag(f)
	f.Float64("speed", 1, "playback speed factor (2 plays twice as fast)")
	f.Duration("max-idle", 0, "shorten pauses longer than this (default: the recording's idle limit)")
	return cmd
}

// openRecordingStore opens the proxy's recording store to read: the
// bucket of --recording-store (from anywhere with its credentials), or the
// directory in --data-dir (on the proxy host).
func openRecordingStore(cmd *cobra.Command) (*recstore.Store, error) {
	v, err := loadConfig(cmd)
	if err != nil {
		return nil, err
	}
	dir, url := v.GetString("data-dir"), v.GetString(recstore.URLKey)
	if dir == "" && url == "" {
		return nil, fmt.Errorf("data-dir: required; set --data-dir or LIMEN_DATA_DIR to the proxy's data directory, or --%s to its store", recstore.URLKey)
	}
	st, err := recstore.OpenURL(cmd.Context(), url, recstore.URLOptions{DataDir: dir, ReadOnly: true})
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no recording store in %s: is --data-dir the proxy's data directory, and has a session been recorded?", dir)
	}
	return st, err
}
