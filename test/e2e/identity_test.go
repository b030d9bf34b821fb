package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
)

// bindUser binds a Kubernetes user name to a ClusterRole in namespace ns,
// as a cluster administrator would for a user of the cluster's own.
func bindUser(t *testing.T, ns, name, user, role string) {
	t.Helper()
	c := clustertest.Cluster(t)
	_, err := c.Client.RbacV1().RoleBindings(ns).Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("bind user %q to %s in %s: %v", user, role, ns, err)
	}
}

// TestKubeUserPrefix: the cluster has a user "bob" of its own, who may edit
// in a namespace. Without a prefix Limen's bob is that user to RBAC (the
// default, as the ADR's whoami shows bare names); with --kube-user-prefix
// limen: the cluster sees "limen:bob" (kubectl auth whoami says so), the
// RoleBinding for the bare name no longer applies, and one for the
// prefixed name does.
func TestKubeUserPrefix(t *testing.T) {
	ns := clustertest.Namespace(t)
	bindUser(t, ns, "cluster-bob", "bob", "edit")
	create := func(kc, name, wantUser string, allowed bool) func() string {
		return func() string {
			_, stderr, code := kubectl(t, kc, "", "-n", ns, "create", "configmap", name)
			refused := fmt.Sprintf("User %q cannot create resource \"configmaps\"", wantUser)
			switch {
			case allowed && code != 0:
				return fmt.Sprintf("%s may create configmaps in %s: exit %d, stderr %q", wantUser, ns, code, stderr)
			case !allowed && (code == 0 || !strings.Contains(stderr, refused)):
				return fmt.Sprintf("%s may not create configmaps in %s: exit %d, stderr %q; want %q", wantUser, ns, code, stderr, refused)
			}
			return ""
		}
	}

	// No prefix: the ADR's bare names, and the cluster's bob's RBAC with them.
	bare := userKubeconfig(t, "bob")
	if u := whoami(t, bare); u.Username != "bob" {
		t.Fatalf("without a prefix whoami says %q, want bob", u.Username)
	}
	eventually(t, create(bare, "as-bare-bob", "bob", true))

	e := extraGateway(t, "--kube-user-prefix limen:", gatewaytest.Options{WorkerArgs: []string{"--kube-user-prefix", "limen:"}})
	kc := login(t, e, "bob")
	u := whoami(t, kc)
	if u.Username != "limen:bob" || !slices.Contains(u.Groups, "limen:view") || len(u.Extra[sessionExtra(e)]) != 1 {
		t.Fatalf("with --kube-user-prefix limen: whoami says %+v, want limen:bob in limen:view with a session", u)
	}
	// limen:view may list but not create; the binding for "bob" is not his.
	if out, stderr, code := kubectl(t, kc, "", "-n", ns, "get", "configmaps", "-o", "name"); code != 0 || !strings.Contains(out, "configmap/as-bare-bob") {
		t.Fatalf("limen:bob lists configmaps in %s: exit %d, stdout %q, stderr %q", ns, code, out, stderr)
	}
	if msg := create(kc, "as-limen-bob", "limen:bob", false)(); msg != "" {
		t.Fatal(msg)
	}
	bindUser(t, ns, "limen-bob", "limen:bob", "edit")
	eventually(t, create(kc, "as-limen-bob", "limen:bob", true))
}
