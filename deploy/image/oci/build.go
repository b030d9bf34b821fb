package oci

import (
	"os"
	"os/exec"
	"runtime"
)

// LDFlagsVersion is the link flag that sets limen version's output.
const LDFlagsVersion = "-X github.com/limenhq/limen/gateway/buildinfo.Version="

func goBuild(repoRoot, out, version string) *exec.Cmd {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w "+LDFlagsVersion+version, "-o", out, "./cmd/limen")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	return cmd
}

func goarch() string { return runtime.GOARCH }
