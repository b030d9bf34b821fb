package chaos

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/load"
)

// podToldWithin is how soon the client of a stream into a deleted pod must
// be told (issue #32).
const podToldWithin = 5 * time.Second

// TestPodDeleted deletes a pod under an open exec and an open
// port-forward, through Limen, and measures how soon each client is told.
// The exec must end within podToldWithin with an error, and its stream
// have one session.end.
//
// The port-forward must be told within podToldWithin too: the test
// kubelet breaks the connections into a pod when it is deleted, as a real
// kubelet's go with the pod's network namespace, and Limen passes the end
// on.
func TestPodDeleted(t *testing.T) {
	full(t)
	_, kc := gateway(t)
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "doomed", []string{"sleep", "infinity"}, false)
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Close() })
	go load.ServeEcho(echo)
	began := time.Now()
	l := load.Start(context.Background(), load.Config{Namespace: ns, Kubectl: clustertest.Kubectl(t, ""), Kubeconfig: kc,
		Pod: "doomed", EchoPort: echo.Addr().(*net.TCPAddr).Port})
	t.Cleanup(l.Stop)
	deadline := time.Now().Add(30 * time.Second)
	for s := l.Snapshot(); len(s.Execs) == 0 || s.Execs[0].Last < 3 || s.PFRounds < 3; s = l.Snapshot() {
		if time.Now().After(deadline) {
			t.Fatalf("exec and port-forward not under way within 30s: %+v", s.Execs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	deleted := time.Now()
	err = clustertest.Cluster(t).Client.CoreV1().Pods(ns).Delete(context.Background(), "doomed", metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	if err != nil {
		t.Fatal(err)
	}
	var execEnd, pfEnd *load.StreamEnd
	for time.Since(deleted) < podToldWithin+5*time.Second && (execEnd == nil || pfEnd == nil) {
		s := l.Snapshot()
		if execEnd == nil && len(s.ExecEnds) > 0 {
			execEnd = &s.ExecEnds[0]
		}
		if pfEnd == nil && len(s.PFEnds) > 0 {
			pfEnd = &s.PFEnds[0]
		}
		time.Sleep(50 * time.Millisecond)
	}
	l.Stop()
	told := func(what string, e *load.StreamEnd) string {
		if e == nil {
			return fmt.Sprintf("%s: not told within %s", what, podToldWithin+5*time.Second)
		}
		return fmt.Sprintf("%s: told %s after the delete: %s", what, e.At.Sub(deleted).Round(time.Millisecond), said(*e))
	}
	var gap string
	switch {
	case pfEnd == nil:
		gap = fmt.Sprintf("the port-forward into the deleted pod still moves data %s after the delete", podToldWithin+5*time.Second)
	case pfEnd.At.Sub(deleted) > podToldWithin:
		gap = fmt.Sprintf("the port-forward's client was told %s after the pod's delete: want within %s", pfEnd.At.Sub(deleted).Round(time.Millisecond), podToldWithin)
	}
	switch {
	case execEnd == nil:
		gap = fmt.Sprintf("the exec into the deleted pod still runs %s after the delete", podToldWithin+5*time.Second)
	case execEnd.At.Sub(deleted) > podToldWithin:
		gap = fmt.Sprintf("the exec's client was told %s after the pod's delete: want within %s", execEnd.At.Sub(deleted).Round(time.Millisecond), podToldWithin)
	case execEnd.Clean:
		t.Errorf("the exec into the deleted pod exited 0: a cut stream passed for a clean end")
	}
	r := &run{e: shared.env, began: began, killed: deleted}
	evs := r.auditEvents(t)
	ends := load.CheckOneEnd(t, evs)
	var reasons []string
	for _, ev := range evs {
		if ev.Type == audit.TypeSessionStart && ev.Time.Before(deleted) {
			if e, ok := ends[ev.SessionID]; ok {
				reasons = append(reasons, fmt.Sprintf("%s %s (%s)", ev.Session.Login, e.Session.EndReason, e.Session.EndHop))
			}
		}
	}
	load.Figures(t, "a pod deleted under an exec and a port-forward",
		told("exec", execEnd), told("port-forward", pfEnd), fmt.Sprintf("session.end: %v", reasons))
	if gap != "" {
		t.Error(gap)
	}
}
