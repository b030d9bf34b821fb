package e2e

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limenhq/limen/gateway/access"
	"github.com/limenhq/limen/gateway/impersonate"
	"github.com/limenhq/limen/gateway/scope"
	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
)

// workspacesCRD is a real CRD with two served versions, so that a scope
// listing v1 can be shown not to cover v1beta1.
const workspacesCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: workspaces.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: workspaces, singular: workspace, kind: Workspace}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
  - name: v1beta1
    served: true
    storage: false
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

// The groups the scope e2e grants: adminGroup is bound to cluster-admin, so
// that only the scope can be what refuses; namedGroup to nothing.
const (
	adminGroup = "limen:e2e-scope-admin"
	namedGroup = "limen:e2e-named"
)

// discovery is what kubectl reads to map a resource name to its path and
// to validate what it creates.
var discovery = []any{"/api", "/api/*", "/apis", "/apis/*", "/openapi/*"}

// scopeData is the policy data of the scope e2e: alice (groups=dev) gets
// adminGroup through kubectl and through each scoped application, and
// namedGroup through named-app, which also gives her a name of her own.
func scopeData(ns string) map[string]any {
	all := []any{map[string]any{"name": "*"}}
	role := func(groups []any, clients ...any) map[string]any {
		r := map[string]any{"groups": groups, "clusters": all}
		if len(clients) > 0 {
			r["clients"] = clients
		}
		return r
	}
	ws := func(version string, verbs ...any) map[string]any {
		return map[string]any{"group": "example.com", "version": version, "resource": "workspaces", "namespaces": []any{ns}, "verbs": verbs}
	}
	return map[string]any{"limen": map[string]any{"config": map[string]any{
		"roles": map[string]any{
			"admin":     map[string]any{"groups": []any{"limen:edit"}, "clusters": all, "admin": []any{"*"}},
			"cli-admin": role([]any{adminGroup}),
			"scoped":    role([]any{adminGroup}, "ws-app", "exec-app", "empty-app", "discovery-app"),
			"named":     role([]any{namedGroup}, "named-app"),
		},
		"bindings": map[string]any{"traits": map[string]any{"groups": map[string]any{
			"admins": []any{"admin"},
			"dev":    []any{"cli-admin", "scoped", "named"},
		}}},
		"clients": map[string]any{
			"kubectl": map[string]any{"unscoped": true},
			// One CRD in one namespace: list and create, not watch, v1 only.
			"ws-app": map[string]any{"scope": []any{ws("v1", "get", "list", "create")}, "nonResourceURLs": discovery},
			// Pods in the namespace, with exec listed.
			"exec-app": map[string]any{"scope": []any{map[string]any{"group": "", "version": "v1", "resource": "pods",
				"subresources": []any{"exec"}, "namespaces": []any{ns}, "verbs": []any{"get", "create"}}}, "nonResourceURLs": discovery},
			"empty-app":     map[string]any{"scope": []any{}},
			"discovery-app": map[string]any{"nonResourceURLs": discovery},
			"named-app":     map[string]any{"unscoped": true, "userPrefix": "named:"},
		},
	}}}
}

// startScopeGateway installs the CRD and the RBAC the test needs, serves
// scopeData as a signed bundle over https, and starts a proxy and a worker
// that take their policy from it (each its own snapshot, as in production).
func startScopeGateway(t *testing.T, ns string) *gatewaytest.Env {
	t.Helper()
	return startScopeGatewayWith(t, ns, nil)
}

// startScopeGatewayWith is startScopeGateway with more clients: clients,
// if not nil, may add to scopeData's data.limen.config.clients; each added
// client is served the scoped role (adminGroup).
func startScopeGatewayWith(t *testing.T, ns string, clients func(map[string]any)) *gatewaytest.Env {
	t.Helper()
	c := clustertest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin := func(stdin string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, clustertest.Kubectl(t, ""), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
	}
	admin(workspacesCRD, "apply", "-f", "-")
	admin("", "wait", "--for", "condition=established", "--timeout", "60s", "crd/workspaces.example.com")

	rbac := c.Client.RbacV1()
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "limen-e2e-scope-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: adminGroup}},
	}
	// The worker may impersonate only the groups its manifest lists; an
	// operator adds a policy's new groups the same way.
	imp := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "limen-e2e-scope-impersonate"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"groups"}, Verbs: []string{"impersonate"},
			ResourceNames: []string{adminGroup, namedGroup}}},
	}
	impb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "limen-e2e-scope-impersonate"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: imp.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "limen-worker", Namespace: "limen-system"}},
	}
	for _, del := range []func() error{
		func() error { return rbac.ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{}) },
		func() error { return rbac.ClusterRoleBindings().Delete(ctx, impb.Name, metav1.DeleteOptions{}) },
		func() error { return rbac.ClusterRoles().Delete(ctx, imp.Name, metav1.DeleteOptions{}) },
	} {
		_ = del() // a previous run's
		t.Cleanup(func() { _ = del() })
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.ClusterRoles().Create(ctx, imp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, impb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	data := scopeData(ns)
	if clients != nil {
		cfg := data["limen"].(map[string]any)["config"].(map[string]any)
		registry := cfg["clients"].(map[string]any)
		before := map[string]bool{}
		for name := range registry {
			before[name] = true
		}
		clients(registry)
		scoped := cfg["roles"].(map[string]any)["scoped"].(map[string]any)
		for name := range registry {
			if !before[name] {
				scoped["clients"] = append(scoped["clients"].([]any), name)
			}
		}
	}
	bundle := signedBundle(t, ctx, dir, data)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/gzip")
		_, _ = w.Write(bundle)
	}))
	t.Cleanup(srv.Close)
	caFile := filepath.Join(dir, "bundle-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--policy-bundle-url", srv.URL + "/bundle.tar.gz", "--policy-bundle-ca", caFile,
		"--policy-public-key", filepath.Join(repoDir(t), "bundles", "testkeys", "TEST-ONLY-verification-key.pem")}
	env, err := gatewaytest.StartWith(ctx, c, filepath.Join(dir, "gw"), os.Stderr, gatewaytest.Options{ProxyArgs: flags, WorkerArgs: flags})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Stop)
	return env
}

// signedBundle builds the default Rego with data into a bundle signed with
// the test key, with OPA's own opa build as make bundle does.
func signedBundle(t *testing.T, ctx context.Context, dir string, data map[string]any) []byte {
	t.Helper()
	root := repoDir(t)
	src := filepath.Join(dir, "bundle-src")
	if err := os.MkdirAll(src, 0o700); err != nil {
		t.Fatal(err)
	}
	regos, _ := filepath.Glob(filepath.Join(root, "policies", "*.rego"))
	for _, f := range regos {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, filepath.Base(f)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	raw, _ := json.Marshal(data)
	if err := os.WriteFile(filepath.Join(src, "data.json"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "bundle.tar.gz")
	cmd := exec.CommandContext(ctx, "go", "tool", "opa", "build", "--bundle", src, "--revision", "1",
		"--signing-key", filepath.Join(root, "bundles", "testkeys", "TEST-ONLY-signing-key.pem"), "--signing-alg", "RS256", "-o", out)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("opa build: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// appKubeconfig logs alice in (once per Env, the proxy rate-limits logins)
// and writes her kubeconfig for the application client app ("" for kubectl).
func appKubeconfig(t *testing.T, e *gatewaytest.Env, app string) string {
	t.Helper()
	ctx := context.Background()
	once, _ := scopeLogins.LoadOrStore(e, &scopeLogin{})
	login := once.(*scopeLogin)
	login.Do(func() { _, login.err = e.Login(ctx, "alice") })
	if login.err != nil {
		t.Fatal(login.err)
	}
	args := []string{"kube", "login", gatewaytest.ClusterName}
	if app != "" {
		args = append(args, "--app", app)
	}
	out, err := e.Limen(ctx, "alice", "", args...)
	if err != nil {
		t.Fatalf("limen %v: %v", args, err)
	}
	for _, l := range strings.Split(out, "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(l), "export KUBECONFIG="); ok {
			return p
		}
	}
	t.Fatalf("limen %v printed no export line: %q", args, out)
	return ""
}

// scopeLogins holds a scopeLogin per Env: each Env's proxy signs alice in
// once.
var scopeLogins sync.Map

type scopeLogin struct {
	sync.Once
	err error
}

// outOfScope checks that a kubectl run was refused by Limen's scope, not
// by Kubernetes: kubectl prints the Status reason Limen set.
func outOfScope(t *testing.T, what string, stderr string, code int) {
	t.Helper()
	if code == 0 || !strings.Contains(stderr, scope.Reason) || !strings.Contains(stderr, scope.Phrase) {
		t.Fatalf("%s: exit %d, stderr %q; want the scope's refusal (%s)", what, code, stderr, scope.Reason)
	}
}

func ok(t *testing.T, what, stdout, stderr string, code int) {
	t.Helper()
	if code != 0 {
		t.Fatalf("%s: exit %d, stdout %q, stderr %q", what, code, stdout, stderr)
	}
}

// TestScope is issue #15's e2e on the real API server and a real CRD.
func TestScope(t *testing.T) {
	ns := clustertest.Namespace(t)
	if m, _ := impersonate.ParseMode(os.Getenv(gatewaytest.RBACEnv)); m == impersonate.ModeConstrained {
		t.Skip("the scope e2e grants its worker the legacy impersonation of its test groups")
	}
	e := startScopeGateway(t, ns)
	wsApp := appKubeconfig(t, e, "ws-app")
	cli := appKubeconfig(t, e, "")
	ws := "/apis/example.com/v1/namespaces/" + ns + "/workspaces"
	manifest := func(name string) string {
		return fmt.Sprintf("apiVersion: example.com/v1\nkind: Workspace\nmetadata: {name: %s, namespace: %s}\nspec: {size: 1}\n", name, ns)
	}

	t.Run("an app scoped to one CRD in one namespace can do exactly that", func(t *testing.T) {
		o, se, code := kubectl(t, wsApp, manifest("from-app"), "create", "-f", "-")
		ok(t, "create a workspace through ws-app", o, se, code)
		o, se, code = kubectl(t, wsApp, "", "-n", ns, "get", "workspaces", "-o", "name")
		ok(t, "list workspaces through ws-app", o, se, code)
		if !strings.Contains(o, "workspace.example.com/from-app") {
			t.Fatalf("list through ws-app: %q", o)
		}
		_, se, code = kubectl(t, wsApp, "", "-n", "default", "get", "workspaces")
		outOfScope(t, "workspaces in another namespace", se, code)
		_, se, code = kubectl(t, wsApp, "", "-n", ns, "get", "configmaps")
		outOfScope(t, "configmaps in the namespace", se, code)
		_, se, code = kubectl(t, wsApp, "", "-n", ns, "delete", "workspace", "from-app")
		outOfScope(t, "delete, not listed", se, code)
		_, se, code = kubectl(t, wsApp, "", "-n", "kube-system", "get", "secrets")
		outOfScope(t, "secrets in kube-system", se, code)
	})

	t.Run("the same user through kubectl keeps full RBAC", func(t *testing.T) {
		o, se, code := kubectl(t, cli, "", "-n", "kube-system", "get", "secrets", "-o", "name")
		ok(t, "secrets in kube-system through kubectl", o, se, code)
		o, se, code = kubectl(t, cli, "", "-n", ns, "delete", "workspace", "from-app")
		ok(t, "delete a workspace through kubectl", o, se, code)
		o, se, code = kubectl(t, cli, "", "get", "--raw", ws+"?watch=true&timeoutSeconds=1")
		ok(t, "watch through kubectl", o, se, code)
	})

	t.Run("an empty scope exposes nothing even to a cluster-admin group", func(t *testing.T) {
		empty := appKubeconfig(t, e, "empty-app")
		for _, args := range [][]string{
			{"get", "--raw", ws},
			{"get", "--raw", "/api/v1/namespaces/kube-system/secrets"},
			{"get", "--raw", "/version"},
			{"get", "--raw", "/apis"},
		} {
			_, se, code := kubectl(t, empty, "", args...)
			outOfScope(t, "empty-app "+strings.Join(args, " "), se, code)
		}
		// kubectl auth whoami prints its own error, and Limen's refusal as a
		// warning.
		_, se, code := kubectl(t, empty, "", "auth", "whoami")
		if code == 0 || !strings.Contains(se, "selfsubjectreviews (authentication.k8s.io/v1) is "+scope.Phrase) {
			t.Fatalf("empty-app auth whoami: exit %d, stderr %q", code, se)
		}
	})

	t.Run("pods/exec is refused unless listed", func(t *testing.T) {
		clustertest.RunPod(t, ns, "shell", []string{"sh", "-c", "sleep 300"}, false)
		_, se, code := kubectl(t, wsApp, "", "-n", ns, "exec", "shell", "--", "echo", "hi")
		outOfScope(t, "exec through ws-app", se, code)
		execApp := appKubeconfig(t, e, "exec-app")
		o, se, code := kubectl(t, execApp, "", "-n", ns, "exec", "shell", "--", "echo", "hi")
		ok(t, "exec through exec-app, which lists pods/exec", o, se, code)
		if strings.TrimSpace(o) != "hi" {
			t.Fatalf("exec through exec-app printed %q", o)
		}
		_, se, code = kubectl(t, execApp, "", "-n", ns, "logs", "shell")
		outOfScope(t, "logs through exec-app, which lists only exec", se, code)
	})

	t.Run("a watch is refused where only list is listed", func(t *testing.T) {
		o, se, code := kubectl(t, wsApp, "", "get", "--raw", ws)
		ok(t, "list through ws-app", o, se, code)
		_, se, code = kubectl(t, wsApp, "", "get", "--raw", ws+"?watch=true&timeoutSeconds=1")
		outOfScope(t, "watch through ws-app", se, code)
		_, se, code = kubectl(t, wsApp, "", "get", "--raw", "/apis/example.com/v1/watch/namespaces/"+ns+"/workspaces")
		outOfScope(t, "legacy watch path through ws-app", se, code)
	})

	t.Run("v1beta1 is refused where only v1 is listed", func(t *testing.T) {
		_, se, code := kubectl(t, wsApp, "", "get", "--raw", "/apis/example.com/v1beta1/namespaces/"+ns+"/workspaces")
		outOfScope(t, "v1beta1 through ws-app", se, code)
		o, se, code := kubectl(t, cli, "", "get", "--raw", "/apis/example.com/v1beta1/namespaces/"+ns+"/workspaces")
		ok(t, "v1beta1 through kubectl", o, se, code)
	})

	t.Run("discovery alone grants nothing", func(t *testing.T) {
		disc := appKubeconfig(t, e, "discovery-app")
		o, se, code := kubectl(t, disc, "", "get", "--raw", "/apis/example.com/v1")
		ok(t, "discovery through discovery-app", o, se, code)
		if !strings.Contains(o, "workspaces") {
			t.Fatalf("discovery: %q", o)
		}
		_, se, code = kubectl(t, disc, "", "get", "--raw", ws)
		outOfScope(t, "workspaces through discovery-app", se, code)
		_, se, code = kubectl(t, disc, "", "-n", ns, "get", "workspaces")
		outOfScope(t, "kubectl get workspaces through discovery-app", se, code)
	})

	t.Run("out of scope is audited as auth.denied with reason scope", func(t *testing.T) {
		out, err := e.Limen(context.Background(), "admin", "", "audit", "search", "--data-dir", e.ProxyDataDir(), "--type", "auth.denied", "--json")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, `"reason":"scope: `) || !strings.Contains(out, `"client_id":"empty-app"`) {
			t.Fatalf("no auth.denied with reason scope for empty-app in %.2000s", out)
		}
	})

	t.Run("Access: what may I do, three answers", func(t *testing.T) {
		report := func(app string) access.Report {
			t.Helper()
			args := []string{"kube", "access", gatewaytest.ClusterName, "-n", ns, "-o", "json"}
			if app != "" {
				args = append(args, "--app", app)
			}
			out, err := e.Limen(context.Background(), "alice", "", args...)
			if err != nil {
				t.Fatalf("limen %v: %v", args, err)
			}
			var rep access.Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("decode %q: %v", out, err)
			}
			return rep
		}
		answer := func(rep access.Report, resource, verb string) access.Answer {
			for _, r := range rep.Rows {
				if r.Resource.String() == resource {
					return r.Answers[verb]
				}
			}
			t.Fatalf("%s: no row for %s in %+v", rep.Client, resource, rep.Rows)
			return ""
		}
		for _, c := range []struct {
			app, resource, verb string
			want                access.Answer
		}{
			{"ws-app", "workspaces.example.com", "list", access.Allowed},
			{"ws-app", "workspaces.example.com", "watch", access.OutOfScope},
			{"ws-app", "secrets", "get", access.OutOfScope},
			{"", "pods/exec", "create", access.Allowed},
			{"", "secrets", "get", access.Allowed},
			{"named-app", "configmaps", "create", access.RefusedByKubernetes},
			{"empty-app", "pods", "get", access.OutOfScope},
		} {
			rep := report(c.app)
			if got := answer(rep, c.resource, c.verb); got != c.want {
				t.Errorf("client %q, %s %s: %q, want %q", c.app, c.verb, c.resource, got, c.want)
			}
		}
	})

	t.Run("ClientIdentity: one person, two names", func(t *testing.T) {
		named := appKubeconfig(t, e, "named-app")
		if u := whoami(t, named); u.Username != "named:alice" || strings.Join(u.Groups, ",") != namedGroup+",system:authenticated" {
			t.Fatalf("through named-app the cluster sees %q %v, want named:alice in %s", u.Username, u.Groups, namedGroup)
		}
		if u := whoami(t, cli); u.Username != "alice" {
			t.Fatalf("through kubectl the cluster sees %q, want alice", u.Username)
		}
		o, se, code := kubectl(t, cli, "", "-n", ns, "create", "configmap", "by-cli")
		ok(t, "alice through kubectl creates a configmap", o, se, code)
		_, se, code = kubectl(t, named, "", "-n", ns, "create", "configmap", "by-named")
		want := `is forbidden: User "named:alice" cannot create resource "configmaps"`
		if code == 0 || !strings.Contains(se, want) || strings.Contains(se, scope.Phrase) {
			t.Fatalf("named-app: exit %d, stderr %q; want Kubernetes' own refusal %q", code, se, want)
		}
	})
}
