package proxy

import "testing"

// TestDenialCodesAreBounded: a denial's metric label never carries the
// reason's detail (a name, a path, an error text).
func TestDenialCodesAreBounded(t *testing.T) {
	for reason, want := range map[string]string{
		"locked: alice is locked until tomorrow":        "locked",
		"authentication: certificate expired":           "authentication",
		"policy grants no group on prod":                "no group",
		"non-canonical path: /k8s/x/../y":               "non-canonical path",
		"session refused: duplicate":                    "session refused",
		"something new: with /secret/path and user bob": "other",
	} {
		if got := denialCode(reason); got != want {
			t.Errorf("denialCode(%q) = %q, want %q", reason, got, want)
		}
	}
}

// TestKnownClusters: a metric names a cluster the operator configured
// (--clusters or --cluster-label) or one a connected worker serves; any
// other name is "unknown".
func TestKnownClusters(t *testing.T) {
	k := &Kube{KnownCluster: knownClusters(Config{Clusters: []string{"prod"}, ClusterLabels: map[string]map[string]string{"staging": {"env": "stg"}}},
		func(name string) bool { return name == "edge" })}
	for cluster, want := range map[string]string{"prod": "prod", "staging": "staging", "edge": "edge", "c42": "unknown", "": "unknown"} {
		if got := k.clusterLabel(cluster); got != want {
			t.Errorf("clusterLabel(%q) = %q, want %q", cluster, got, want)
		}
	}
	if got := (&Kube{}).clusterLabel("prod"); got != "unknown" {
		t.Errorf("without KnownCluster: %q, want unknown", got)
	}
}
