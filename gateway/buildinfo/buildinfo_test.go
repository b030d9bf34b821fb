package buildinfo

import (
	"runtime"
	"strings"
	"testing"
)

func TestGetReportsToolchainVersions(t *testing.T) {
	old := Commit
	t.Cleanup(func() { Commit = old })
	Commit = "abc123"

	got := Get()
	if got.Go != runtime.Version() {
		t.Errorf("Go = %q, want %q", got.Go, runtime.Version())
	}
	if !strings.HasPrefix(got.OPA, "1.") {
		t.Errorf("OPA = %q, want a v1 release", got.OPA)
	}
	if got.Commit != "abc123" {
		t.Errorf("Commit = %q, want the linker value", got.Commit)
	}
	for _, want := range []string{"limen dev", "commit abc123", "go go", "opa 1."} {
		if !strings.Contains(got.String(), want) {
			t.Errorf("String() = %q, missing %q", got.String(), want)
		}
	}
}
