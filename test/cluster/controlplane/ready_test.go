package controlplane

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMissingAggregatedRules(t *testing.T) {
	get := rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}
	list := rbacv1.PolicyRule{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}
	source := func(name, label string, rules ...rbacv1.PolicyRule) rbacv1.ClusterRole {
		return rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{label: "true"}}, Rules: rules}
	}
	view := func(rules ...rbacv1.PolicyRule) rbacv1.ClusterRole {
		return rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "view"},
			AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{
				{MatchLabels: map[string]string{"aggregate-to-view": "true"}},
			}},
			Rules: rules,
		}
	}
	a := source("a", "aggregate-to-view", get)
	b := source("b", "aggregate-to-view", list)
	other := source("other", "aggregate-to-edit", rbacv1.PolicyRule{Verbs: []string{"delete"}})
	for _, tc := range []struct {
		name string
		role rbacv1.ClusterRole
		want string
	}{
		{"empty, as before the controller ran", view(), "a"},
		{"one source aggregated", view(get), "b"},
		{"every source aggregated", view(list, get), ""},
		{"a role that matches no source", rbacv1.ClusterRole{
			ObjectMeta:      metav1.ObjectMeta{Name: "lonely"},
			AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"nothing": "true"}}}},
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := missingAggregatedRules(tc.role, []rbacv1.ClusterRole{tc.role, a, b, other}); got != tc.want {
				t.Fatalf("missingAggregatedRules = %q, want %q", got, tc.want)
			}
		})
	}
}
