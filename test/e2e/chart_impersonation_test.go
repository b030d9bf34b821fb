package e2e

import (
	"strings"
	"testing"
)

// TestChartImpersonationAuto: by default the chart gives the worker
// constrained impersonation where the cluster serves it (1.36+) and legacy
// before, and the worker's --kube-impersonation always matches the RBAC it
// is given. A stolen legacy worker token may impersonate any user name, so
// legacy is only the fallback.
func TestChartImpersonationAuto(t *testing.T) {
	base := []string{"--set", "proxy.enabled=false", "--set", "worker.cluster=demo",
		"--set", "worker.proxyAddress=limen.example:443", "--set", "worker.joinToken.value=x",
		"--set", "worker.networkPolicy.enabled=false"}
	for _, tt := range []struct{ kube, set, want string }{
		{"1.35.3", "", "legacy"},
		{"1.36.0", "", "constrained"},
		{"1.37.2", "", "constrained"},
		{"1.37.2", "worker.rbac.impersonation=legacy", "legacy"},
		{"1.35.3", "worker.rbac.impersonation=constrained", "constrained"},
	} {
		args := append(append([]string(nil), base...), "--kube-version", tt.kube)
		if tt.set != "" {
			args = append(args, "--set", tt.set)
		}
		manifest, _ := helmTemplate(t, "limen-system", false, args...)
		roles := clusterRoleRules(t, manifest)
		_, legacy := roles["impersonate"]
		_, constrained := roles["impersonate-constrained"]
		if got := map[bool]string{true: "legacy", false: "constrained"}[legacy]; legacy == constrained || got != tt.want {
			t.Errorf("Kubernetes %s %s: ClusterRoles %v, want %s", tt.kube, tt.set, keys(roles), tt.want)
		}
		if !strings.Contains(manifest, "kube-impersonation: "+tt.want) {
			t.Errorf("Kubernetes %s %s: the worker's config does not say kube-impersonation: %s", tt.kube, tt.set, tt.want)
		}
	}
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
