package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limenhq/limen/gateway/impersonate"
	"github.com/limenhq/limen/gateway/scope"
	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
)

// streamVerbLists are the verb lists the differential test gives the
// stream subresources, in RBAC and in a scope alike.
var streamVerbLists = map[string][]string{
	"get":    {"get"},
	"create": {"create"},
	"both":   {"get", "create"},
}

// streamVerbsClient is the registered application whose scope lists the
// stream subresources with the verb list named key.
func streamVerbsClient(key string) string { return "verbs-" + key }

// streamVerbsScope is that application's entry in data.limen.config.clients:
// its pods (to read the pod, as kubectl does first) and the three stream
// subresources with the verbs, in ns.
func streamVerbsScope(ns string, verbs []string) map[string]any {
	return map[string]any{
		"scope": []any{
			map[string]any{"group": "", "version": "v1", "resource": "pods", "namespaces": []any{ns}, "verbs": []any{"get"}},
			map[string]any{"group": "", "version": "v1", "resource": "pods", "subresources": []any{"exec", "attach", "portforward"},
				"namespaces": []any{ns}, "verbs": toAny(verbs)},
		},
		"nonResourceURLs": discovery,
	}
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// A stream transport as kubectl speaks it: the kubectl, the subcommand, and
// whether it tries WebSocket first (and falls back to SPDY when the
// upgrade is refused, as kubectl 1.30 and later do).
type streamTransport struct {
	name      string
	minor     string // kubectl.1.NN; "" the newest
	kind      string // exec, attach, portforward
	websocket bool
}

var streamTransports = []streamTransport{
	{name: "exec over SPDY (kubectl 1.29)", minor: "1.29", kind: "exec"},
	{name: "exec over WebSocket (newest kubectl)", kind: "exec", websocket: true},
	{name: "attach over SPDY (kubectl 1.29)", minor: "1.29", kind: "attach"},
	{name: "attach over WebSocket (newest kubectl)", kind: "attach", websocket: true},
	{name: "port-forward over SPDY (kubectl 1.29)", minor: "1.29", kind: "portforward"},
	{name: "port-forward over SPDY in WebSocket (newest kubectl)", kind: "portforward", websocket: true},
}

// verdict is what one kubectl run showed: whether its WebSocket upgrade was
// refused (kubectl then says it falls back, at -v=4), and whether the
// stream opened in the end.
type verdict struct {
	wsRefused bool
	opened    bool
	stderr    string
}

// The lines kubectl logs at -v=4 when it falls back from WebSocket to SPDY
// (client-go's remotecommand.FallbackExecutor and portforward.FallbackDialer).
var fallbackLines = []string{"RemoteCommand fallback", "fallback to secondary dialer"}

// openOnce runs tr against the pod as kubeconfig (with extra arguments,
// such as --as for the direct runs) and says what happened.
func (tr streamTransport) openOnce(t *testing.T, kubeconfig, ns, pod string, port int, extra ...string) verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append([]string{"--kubeconfig", kubeconfig, "-v=4", "-n", ns}, extra...)
	marker := fmt.Sprintf("verbs-open-%d", time.Now().UnixNano())
	switch tr.kind {
	case "exec":
		args = append(args, "exec", pod, "--", "echo", marker)
	case "attach":
		args = append(args, "attach", pod)
		marker = "verbs-tick"
	case "portforward":
		args = append(args, "port-forward", "pod/"+pod, fmt.Sprintf(":%d", port))
		marker = "Forwarding from 127.0.0.1:"
	}
	cmd := exec.CommandContext(ctx, clustertest.Kubectl(t, tr.minor), args...)
	// The defaults of each kubectl, said out loud.
	ws := strconv.FormatBool(tr.websocket)
	cmd.Env = append(os.Environ(), "KUBECTL_REMOTE_COMMAND_WEBSOCKETS="+ws, "KUBECTL_PORT_FORWARD_WEBSOCKETS="+ws)
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	seen := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		found := false
		for sc.Scan() {
			if !found && strings.Contains(sc.Text(), marker) {
				found = true
				seen <- true
			}
		}
		if !found {
			seen <- false
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	opened := <-seen // the marker, or kubectl's end without it
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if ctx.Err() != nil && !opened {
		t.Fatalf("%s: neither opened nor refused within a minute; stderr:\n%s", tr.name, stderr.String())
	}
	v := verdict{opened: opened, stderr: stderr.String()}
	for _, l := range fallbackLines {
		v.wsRefused = v.wsRefused || strings.Contains(v.stderr, l)
	}
	return v
}

// transportVerdict is the verdict on the transport itself: for WebSocket,
// whether the upgrade went through (a fallback means it was refused); for
// SPDY, whether the stream opened.
func (tr streamTransport) allowed(v verdict) bool {
	if tr.websocket {
		return !v.wsRefused && v.opened
	}
	return v.opened
}

// apiServerStreamVerdicts is what kube-apiserver v1.37 (test/cluster, with
// its default feature gates: AuthorizePodWebsocketUpgradeCreatePermission
// on) answers, per verb list and transport: SPDY is a POST, authorized as
// create; a WebSocket upgrade is a GET, authorized as get and then, in the
// subresource's handler, as create.
var apiServerStreamVerdicts = map[string]struct{ spdy, websocket bool }{
	"get":    {spdy: false, websocket: false},
	"create": {spdy: true, websocket: false},
	"both":   {spdy: true, websocket: true},
}

// TestScopeStreamVerbs is issue #31's differential test: for each transport
// of exec, attach and port-forward and each verb list, the scope's verdict
// (alice's group through Limen is cluster-admin, so only the scope can
// refuse) equals the API server's RBAC verdict for a user granted exactly
// those verbs, asked directly.
func TestScopeStreamVerbs(t *testing.T) {
	ns := clustertest.Namespace(t)
	if m, _ := impersonate.ParseMode(os.Getenv(gatewaytest.RBACEnv)); m == impersonate.ModeConstrained {
		t.Skip("the scope e2e grants its worker the legacy impersonation of its test groups")
	}
	c := clustertest.Cluster(t)
	e := startScopeGatewayWith(t, ns, func(clients map[string]any) {
		for key, verbs := range streamVerbLists {
			clients[streamVerbsClient(key)] = streamVerbsScope(ns, verbs)
		}
	})
	clustertest.RunPod(t, ns, "verbs", []string{"sh", "-c", "while true; do echo verbs-tick; sleep 0.2; done"}, false)
	port := serveSink(t)

	// RBAC: one user per verb list, granted the pod and the three stream
	// subresources with exactly those verbs, in ns.
	ctx := context.Background()
	rbac := c.Client.RbacV1()
	for key, verbs := range streamVerbLists {
		role := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "verbs-" + key, Namespace: ns},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
				{APIGroups: []string{""}, Resources: []string{"pods/exec", "pods/attach", "pods/portforward"}, Verbs: verbs},
			},
		}
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "verbs-" + key, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "limen-e2e-verbs-" + key}},
		}
		if _, err := rbac.Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := rbac.RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfigs := map[string]string{}
	for key := range streamVerbLists {
		kubeconfigs[key] = appKubeconfig(t, e, streamVerbsClient(key))
	}

	for _, key := range []string{"get", "create", "both"} {
		want := apiServerStreamVerdicts[key]
		for _, tr := range streamTransports {
			t.Run(key+"/"+tr.name, func(t *testing.T) {
				direct := tr.openOnce(t, c.Kubeconfig, ns, "verbs", port, "--as", "limen-e2e-verbs-"+key)
				limen := tr.openOnce(t, kubeconfigs[key], ns, "verbs", port)
				wantAllowed := want.spdy
				if tr.websocket {
					wantAllowed = want.websocket
				}
				if got := tr.allowed(direct); got != wantAllowed {
					t.Errorf("the API server, RBAC verbs %v: allowed %v, want %v (the table apiServerStreamVerdicts is wrong for this API server); stderr:\n%s",
						streamVerbLists[key], got, wantAllowed, logTail(direct.stderr))
				}
				if got, ref := tr.allowed(limen), tr.allowed(direct); got != ref {
					t.Errorf("Limen, scope verbs %v: allowed %v; the API server's RBAC with the same verbs: %v; Limen's stderr:\n%s",
						streamVerbLists[key], got, ref, logTail(limen.stderr))
				}
				// After a refused WebSocket upgrade kubectl falls back to
				// SPDY: that is decided as the SPDY transport is.
				if tr.websocket && direct.wsRefused && limen.opened != direct.opened {
					t.Errorf("after the fallback to SPDY: through Limen opened %v, directly %v", limen.opened, direct.opened)
				}
				// A refusal through Limen is the scope's, said as such.
				if !limen.opened && !strings.Contains(limen.stderr, scope.Phrase) {
					t.Errorf("Limen refused without saying it is the scope; stderr:\n%s", logTail(limen.stderr))
				}
				t.Logf("RBAC %v: websocket refused %v, opened %v; scope %v: websocket refused %v, opened %v",
					streamVerbLists[key], direct.wsRefused, direct.opened, streamVerbLists[key], limen.wsRefused, limen.opened)
			})
		}
	}
}

// logTail is the end of a long kubectl log, for a failure message.
func logTail(s string) string {
	if len(s) > 3000 {
		return "…" + s[len(s)-3000:]
	}
	return s
}
