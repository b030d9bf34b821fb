package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limenhq/limen/gateway/impersonate"
	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
)

// Issue 12, item 7: deploy/kube/worker-rbac-constrained.yaml, proved on
// the real API server with the worker's real token. The whole suite runs
// under that variant with LIMEN_E2E_RBAC=constrained; these tests run it
// in every run, through a second proxy and worker whose ServiceAccount is
// bound by the constrained manifest alone.

// constrainedGateway is a proxy and worker under the constrained worker
// RBAC: the shared one when the suite runs under it, otherwise a second
// one, for this test, with a ServiceAccount of its own.
func constrainedGateway(t *testing.T) *gatewaytest.Env {
	t.Helper()
	if e := gateway(t); e.RBAC() == impersonate.ModeConstrained {
		return e
	}
	return extraGateway(t, "the constrained worker RBAC", gatewaytest.Options{
		RBAC: impersonate.ModeConstrained, ServiceAccount: "limen-worker-constrained",
	})
}

// TestConstrainedRefusesResourcesOffTheList: alice's groups (limen:edit,
// limen:view) allow her to read Secrets by RBAC, as a SubjectAccessReview
// confirms; the constrained manifest does not list Secrets, so the API
// server itself refuses her through Limen, naming the impersonate-on verb
// the worker lacks, while a listed resource in the same namespace works.
func TestConstrainedRefusesResourcesOffTheList(t *testing.T) {
	e := constrainedGateway(t)
	ns := clustertest.Namespace(t)
	c := clustertest.Cluster(t)
	ctx := context.Background()
	if _, err := c.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"},
		StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"list", "get", "create"} {
		sar, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: "alice", Groups: []string{"limen:edit", "limen:view", "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: "secrets"}},
		}, metav1.CreateOptions{})
		if err != nil || !sar.Status.Allowed {
			t.Fatalf("RBAC does not let alice's groups %s secrets (%v, %+v): the test proves nothing", verb, err, sar.Status)
		}
	}

	kc := login(t, e, "alice")
	if out, stderr, code := kubectl(t, kc, "", "-n", ns, "get", "configmaps", "-o", "name"); code != 0 {
		t.Fatalf("alice lists configmaps (listed) through the constrained worker: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	for _, tc := range []struct {
		verb string
		args []string
	}{
		{"list", []string{"get", "secrets"}},
		{"get", []string{"get", "secret", "s"}},
		{"create", []string{"create", "secret", "generic", "t", "--from-literal=k=v"}},
	} {
		out, stderr, code := kubectl(t, kc, "", append([]string{"-n", ns}, tc.args...)...)
		want := fmt.Sprintf(`User "system:serviceaccount:limen-system:%s" cannot impersonate-on:user-info:%s resource "secrets"`,
			e.ServiceAccount(), tc.verb)
		if code == 0 || !strings.Contains(stderr, want) {
			t.Errorf("kubectl %v as alice: exit %d, stdout %q, stderr %q; want the API server's refusal %q", tc.args, code, out, stderr, want)
		}
	}
	if _, err := c.Client.CoreV1().Secrets(ns).Get(ctx, "t", metav1.GetOptions{}); err == nil {
		t.Error("the refused create made secret t")
	}
}

// TestConstrainedWorkerTokenAlone: with the worker's ServiceAccount token
// and no Limen in between, each identity outside the manifest's lists is
// refused by the API server: system:masters, a group the manifest does not
// name even when RBAC makes it cluster-admin, a ServiceAccount, a node, a
// UID, an extra other than the session, and a resource off the list, even
// as a system: user whose RBAC reads every Secret (user names cannot be
// listed, so the list of resources is what bounds such a user). The same
// token, shaped as the worker shapes requests, works, so the refusals are
// the manifest's. And the token has no legacy impersonate verb at all.
func TestConstrainedWorkerTokenAlone(t *testing.T) {
	e := constrainedGateway(t)
	ns := clustertest.Namespace(t)
	c := clustertest.Cluster(t)
	ctx := context.Background()
	// A group that RBAC makes all-powerful, and that a forged request would want.
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-limen-cluster-admin"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "limen:cluster-admin"}}}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
	})

	w := newWorkerClient(t, e)
	configmaps := "/api/v1/namespaces/" + ns + "/configmaps"
	session := impersonate.SessionExtraConstrained
	tests := []struct {
		name   string
		path   string
		user   string
		groups []string
		extra  map[string]string // key → value
		uid    string
		code   int
		want   string // in the API server's answer
	}{
		{name: "as the worker impersonates", path: configmaps, user: "alice", groups: []string{"limen:view"},
			extra: map[string]string{session: "0123"}, code: 200, want: `"kind":"ConfigMapList"`},
		{name: "system:masters", path: configmaps, user: "alice", groups: []string{"system:masters"},
			code: 403, want: "impersonating the system:masters group is not allowed"},
		{name: "system:masters beside a listed group", path: configmaps, user: "alice", groups: []string{"limen:view", "system:masters"},
			code: 403, want: "system:masters"},
		{name: "a group RBAC makes cluster-admin", path: configmaps, user: "alice", groups: []string{"limen:cluster-admin"},
			code: 403, want: `cannot impersonate:user-info resource "groups"`},
		{name: "system:nodes", path: configmaps, user: "alice", groups: []string{"system:nodes"},
			code: 403, want: `cannot impersonate:user-info resource "groups"`},
		{name: "a ServiceAccount", path: configmaps, user: "system:serviceaccount:kube-system:default",
			code: 403, want: `cannot impersonate-on:serviceaccount:list resource "configmaps"`},
		{name: "a ServiceAccount with a listed group", path: configmaps, user: "system:serviceaccount:kube-system:default",
			groups: []string{"limen:view"}, code: 403, want: `cannot impersonate resource "serviceaccounts"`},
		{name: "a node", path: configmaps, user: "system:node:" + nodeName(t),
			code: 403, want: `cannot impersonate-on:arbitrary-node:list resource "configmaps"`},
		{name: "a uid", path: configmaps, user: "alice", groups: []string{"limen:view"}, uid: "0",
			code: 403, want: `cannot impersonate:user-info resource "uids"`},
		{name: "the legacy session extra", path: configmaps, user: "alice", groups: []string{"limen:view"},
			extra: map[string]string{impersonate.SessionExtraLegacy: "0123"}, code: 403, want: "must be a domain-prefixed path"},
		{name: "another extra", path: configmaps, user: "alice", groups: []string{"limen:view"},
			extra: map[string]string{"limenhq.github.io/scopes": "all"}, code: 403, want: `cannot impersonate:user-info resource "userextras/limenhq.github.io/scopes"`},
		{name: "a resource off the list", path: "/api/v1/namespaces/" + ns + "/secrets", user: "alice", groups: []string{"limen:edit"},
			code: 403, want: `cannot impersonate-on:user-info:list resource "secrets"`},
		{name: "a system: user whose RBAC reads every Secret", path: "/api/v1/secrets", user: "system:kube-controller-manager",
			groups: []string{"limen:view"}, extra: map[string]string{session: "0123"},
			code: 403, want: `cannot impersonate-on:user-info:list resource "secrets"`},
		{name: "a non-resource URL off the list", path: "/metrics", user: "alice", groups: []string{"limen:edit"},
			code: 403, want: `cannot impersonate-on:user-info:get path "/metrics"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			h.Set("Impersonate-User", tt.user)
			for _, g := range tt.groups {
				h.Add("Impersonate-Group", g)
			}
			for k, v := range tt.extra {
				h.Set("Impersonate-Extra-"+strings.ReplaceAll(k, "/", "%2F"), v)
			}
			if tt.uid != "" {
				h.Set("Impersonate-Uid", tt.uid)
			}
			code, body := w.do(t, http.MethodGet, tt.path, h, "")
			// A refusal is a Status whose message carries the reason.
			var st metav1.Status
			if tt.code != 200 && json.Unmarshal([]byte(body), &st) == nil {
				body = st.Message
			}
			if code != tt.code || !strings.Contains(body, tt.want) {
				t.Fatalf("%d %s; want %d with %q", code, body, tt.code, tt.want)
			}
		})
	}

	// No legacy impersonate verb: the API server answers for the token itself.
	for _, ra := range []authorizationv1.ResourceAttributes{
		{Verb: "impersonate", Resource: "users", Name: "alice"},
		{Verb: "impersonate", Resource: "groups", Name: "limen:view"},
		{Verb: "impersonate", Group: "authentication.k8s.io", Resource: "userextras", Subresource: "limen-session", Name: "0123"},
		{Verb: "impersonate", Group: "authentication.k8s.io", Resource: "userextras", Subresource: session, Name: "0123"},
	} {
		body, _ := json.Marshal(authorizationv1.SelfSubjectAccessReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectAccessReview"},
			Spec:     authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra}})
		code, out := w.do(t, http.MethodPost, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
			http.Header{"Content-Type": {"application/json"}}, string(body))
		var review authorizationv1.SelfSubjectAccessReview
		if err := json.Unmarshal([]byte(out), &review); code != 201 || err != nil {
			t.Fatalf("SelfSubjectAccessReview %+v: %d %s", ra, code, out)
		}
		if review.Status.Allowed {
			t.Errorf("the constrained worker's token may %s %s/%s %s: it holds the legacy verb", ra.Verb, ra.Resource, ra.Subresource, ra.Name)
		}
	}
}

// workerClient speaks to the API server directly with the worker's
// ServiceAccount token, as anyone holding the token could.
type workerClient struct {
	server, token string
	http          *http.Client
}

func newWorkerClient(t *testing.T, e *gatewaytest.Env) *workerClient {
	t.Helper()
	token, err := os.ReadFile(e.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(e.Cluster.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &workerClient{server: e.Cluster.Server, token: strings.TrimSpace(string(token)),
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
}

func (w *workerClient) do(t *testing.T, method, path string, h http.Header, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, w.server+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h.Clone()
	req.Header.Set("Authorization", "Bearer "+w.token)
	resp, err := w.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// nodeName is the test cluster's node.
func nodeName(t *testing.T) string {
	t.Helper()
	nodes, err := clustertest.Cluster(t).Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("list nodes: %v (%d)", err, len(nodes.Items))
	}
	return nodes.Items[0].Name
}
