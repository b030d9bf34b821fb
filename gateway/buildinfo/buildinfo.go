// Package buildinfo reports what a limen binary is: its own version and
// commit (set by the linker), and the versions of Go and OPA it was built with.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"

	opaversion "github.com/open-policy-agent/opa/v1/version"
)

// Version and Commit are set at link time:
//
//	-ldflags "-X github.com/limenhq/limen/gateway/buildinfo.Version=v0.1.0
//	          -X github.com/limenhq/limen/gateway/buildinfo.Commit=$(git rev-parse HEAD)"
var (
	Version = "dev"
	Commit  = ""
)

// Info is the build description printed by `limen version`.
type Info struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Go      string `json:"go"`
	OPA     string `json:"opa"`
}

// Get returns the running binary's build description. When the linker did not
// set a commit, the VCS revision recorded by the Go toolchain is used.
func Get() Info {
	commit := Commit
	if commit == "" {
		commit = vcsRevision()
	}
	if commit == "" {
		commit = "unknown"
	}
	return Info{Version: Version, Commit: commit, Go: runtime.Version(), OPA: opaversion.Version}
}

func vcsRevision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			return s.Value
		}
	}
	return ""
}

// String renders the description on one line per component.
func (i Info) String() string {
	return fmt.Sprintf("limen %s\ncommit %s\ngo %s\nopa %s\n", i.Version, i.Commit, i.Go, i.OPA)
}
