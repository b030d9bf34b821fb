package controlplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// The API server is ready before its controllers have acted: /readyz says
// nothing about kube-controller-manager. Tests and the demo bind groups to
// the aggregated ClusterRoles (view, edit, admin), which are empty until the
// clusterrole-aggregation controller fills them, and create pods, which the
// ServiceAccount admission plugin refuses until the namespace's default
// ServiceAccount exists. waitControllers waits for both, so that "up" means
// ready for use.
func waitControllers(ctx context.Context, client kubernetes.Interface) error {
	checks := []struct {
		what  string
		check func(context.Context, kubernetes.Interface) error
	}{
		{"the aggregated ClusterRoles (view, edit, admin) to be filled by kube-controller-manager", aggregatedRolesReady},
		{"the default ServiceAccount in namespace default", defaultServiceAccountReady},
	}
	for _, c := range checks {
		if err := poll(ctx, c.what, func(ctx context.Context) error { return c.check(ctx, client) }); err != nil {
			return err
		}
	}
	return nil
}

// aggregatedRolesReady reports whether every ClusterRole with an aggregation
// rule holds every rule of the ClusterRoles its selectors match, which is
// what the aggregation controller converges to.
func aggregatedRolesReady(ctx context.Context, client kubernetes.Interface) error {
	list, err := client.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	aggregated := 0
	for _, role := range list.Items {
		if role.AggregationRule == nil {
			continue
		}
		aggregated++
		if missing := missingAggregatedRules(role, list.Items); missing != "" {
			return fmt.Errorf("ClusterRole %s lacks the rules of %s", role.Name, missing)
		}
	}
	if aggregated == 0 {
		return errors.New("no aggregated ClusterRole exists yet")
	}
	return nil
}

// missingAggregatedRules names the first source role whose rules are not all
// in role, or returns "".
func missingAggregatedRules(role rbacv1.ClusterRole, all []rbacv1.ClusterRole) string {
	for _, sel := range role.AggregationRule.ClusterRoleSelectors {
		selector, err := metav1.LabelSelectorAsSelector(&sel)
		if err != nil {
			return fmt.Sprintf("(bad selector %v: %v)", sel, err)
		}
		for _, src := range all {
			if src.Name == role.Name || !selector.Matches(labels.Set(src.Labels)) {
				continue
			}
			for _, want := range src.Rules {
				if !slices.ContainsFunc(role.Rules, func(have rbacv1.PolicyRule) bool {
					return apiequality.Semantic.DeepEqual(have, want)
				}) {
					return src.Name
				}
			}
		}
	}
	return ""
}

func defaultServiceAccountReady(ctx context.Context, client kubernetes.Interface) error {
	_, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return errors.New("not created yet")
	}
	return err
}

// poll calls check until it succeeds or ctx ends, then names what it waited
// for and the last reason it was not ready.
func poll(ctx context.Context, what string, check func(context.Context) error) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		last := check(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), last)
		case <-t.C:
		}
	}
}
