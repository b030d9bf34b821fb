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
