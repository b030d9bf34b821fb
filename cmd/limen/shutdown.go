package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/limenhq/limen/gateway/worker"
)

// maxShutdownTimeout bounds shutdown-timeout: a stop that takes longer is a
// hang, whatever the orchestrator's grace period.
const maxShutdownTimeout = 10 * time.Minute

// addShutdownFlags adds the flags that bound a graceful stop (SIGTERM);
// the worker also has the handover wait.
func addShutdownFlags(f *pflag.FlagSet, def time.Duration, handover bool) {
	f.Duration("shutdown-timeout", def, "on SIGTERM, how long to end sessions cleanly and deliver their audit events and recordings before exiting; "+
		"keep it below the pod's terminationGracePeriodSeconds")
	if handover {
		f.Duration("shutdown-handover", worker.DefaultHandover, "on SIGTERM, how long to keep serving while waiting for another worker of the cluster "+
			"to connect (a rolling update's new pod) before ending this worker's sessions; 0 does not wait")
	}
}

// shutdownTimeout reads shutdown-timeout.
func shutdownTimeout(v *viper.Viper) (time.Duration, error) {
	d := v.GetDuration("shutdown-timeout")
	if d <= 0 || d > maxShutdownTimeout {
		return 0, fmt.Errorf("shutdown-timeout %q: want a duration above 0 and at most %s, such as 25s", v.GetString("shutdown-timeout"), maxShutdownTimeout)
	}
	return d, nil
}

// shutdownHandover reads shutdown-handover as worker.Config.Handover
// takes it: negative for no wait.
func shutdownHandover(v *viper.Viper, timeout time.Duration) (time.Duration, error) {
	d := v.GetDuration("shutdown-handover")
	switch {
	case d < 0 || d >= timeout:
		return 0, fmt.Errorf("shutdown-handover %q: want a duration from 0 to below shutdown-timeout (%s)", v.GetString("shutdown-handover"), timeout)
	case d == 0:
		return -1, nil
	}
	return d, nil
}
