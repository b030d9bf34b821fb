package e2e

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/test/cluster/clustertest"
	demo "github.com/limenhq/limen/test/demo/story"
)

// TestDemoStory tells `make demo`'s story (test/demo/story) on the shared
// proxy and worker, so that the demo cannot rot: each of its steps checks
// what it shows, and here the whole story must hold and print what a
// newcomer is meant to see.
func TestDemoStory(t *testing.T) {
	e := gateway(t)
	ns := clustertest.Namespace(t)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err := demo.Run(ctx, e, demo.Options{
		Kubectl:         clustertest.Kubectl(t, ""),
		AdminKubeconfig: clustertest.Cluster(t).Kubeconfig,
		Namespace:       ns,
		Out:             &out,
	})
	demo.Console(&out, e, false)
	if err != nil {
		t.Fatalf("the demo's story: %v\n%s", err, out.String())
	}
	for _, marker := range []string{
		"alice$ kubectl -n " + ns + " exec hello --", // each command as typed
		"proxy-host$ limen play ",                    // the exec, played back
		"kubectl -n " + ns + " get configmaps -w &",  // the watch the lock ends
		"admin$ limen lock alice --reason",
		demo.LockReason,
		"OutsideLimenScope", // the three answers of limen kube access
		"rbac",
		"proxy-host$ limen audit search",
		"open https://" + e.ProxyAddr + "/console/",
		"DEMO_FLAGS=--keep",
	} {
		if !strings.Contains(out.String(), marker) {
			t.Errorf("the demo's story does not show %q:\n%s", marker, out.String())
		}
	}
	if testing.Verbose() {
		t.Log(out.String())
	}
}
