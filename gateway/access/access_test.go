package access

import (
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/limenhq/limen/gateway/scope"
)

func TestComputeThreeAnswers(t *testing.T) {
	set, err := scope.ParseJSON([]byte(`{
	  "kubectl": {"unscoped": true},
	  "app": {"scope": [{"group": "example.com", "version": "v1", "resource": "workspaces", "namespaces": ["team-a"], "verbs": ["get", "list", "create"]}]},
	  "empty": {}}`))
	if err != nil {
		t.Fatal(err)
	}
	// As Kubernetes answers a SelfSubjectRulesReview for an editor of
	// workspaces who may also read pods, and may get one secret by name.
	rules := authorizationv1.SubjectRulesReviewStatus{ResourceRules: []authorizationv1.ResourceRule{
		{Verbs: []string{"get", "list", "watch", "create", "delete"}, APIGroups: []string{"example.com"}, Resources: []string{"workspaces"}},
		{Verbs: []string{"get", "list"}, APIGroups: []string{""}, Resources: []string{"pods", "pods/log"}},
		{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"one"}},
	}}
	ws := Resource{Group: "example.com", Version: "v1", Resource: "workspaces"}
	pods := Resource{Version: "v1", Resource: "pods"}
	secrets := Resource{Version: "v1", Resource: "secrets"}
	exec := Resource{Version: "v1", Resource: "pods", Subresource: "exec"}
	tests := []struct {
		client, ns string
		r          Resource
		verb       string
		want       Answer
	}{
		{"app", "team-a", ws, "list", Allowed},
		{"app", "team-a", ws, "create", Allowed},
		{"app", "team-a", ws, "watch", OutOfScope},  // RBAC allows, the scope does not
		{"app", "team-a", ws, "delete", OutOfScope}, // likewise
		{"app", "team-b", ws, "list", OutOfScope},   // another namespace
		{"app", "team-a", pods, "get", OutOfScope},  // not listed
		{"kubectl", "team-a", ws, "watch", Allowed}, // unscoped: RBAC alone
		{"kubectl", "team-a", ws, "update", RefusedByKubernetes},
		{"kubectl", "team-a", pods, "get", Allowed},
		{"kubectl", "team-a", exec, "create", RefusedByKubernetes}, // pods does not cover pods/exec
		{"kubectl", "team-a", secrets, "get", RefusedByKubernetes}, // one name is not every secret
		{"empty", "team-a", ws, "get", OutOfScope},
	}
	for _, tt := range tests {
		sc, _ := set.Client(tt.client)
		rep := Compute(sc, tt.ns, rules, []Resource{tt.r})
		if got := rep.Rows[0].Answers[tt.verb]; got != tt.want {
			t.Errorf("%s %s %s in %s: %q, want %q", tt.client, tt.verb, tt.r, tt.ns, got, tt.want)
		}
	}
	if rep := Compute(nil, "x", rules, nil); rep.Rows[0].Answers["get"] != OutOfScope || len(rep.Rows) != len(Common) {
		t.Fatalf("a nil scope (unregistered client): %+v", rep.Rows[0])
	}
	app, _ := set.Client("app")
	if rs := ResourcesFor(app); rs[len(rs)-1] != ws {
		t.Fatalf("ResourcesFor(app) ends with %v, want the workspaces it lists", rs[len(rs)-1])
	}
}
