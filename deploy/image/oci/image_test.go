package oci_test

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/limenhq/limen/deploy/image/oci"
)

// TestImageRunsLimenVersion builds the image as make image does, reads it
// back as a runtime would (every digest checked), and runs its entrypoint
// from the unpacked layer with "version": the CI check of the image where
// no container runtime works.
func TestImageRunsLimenVersion(t *testing.T) {
	repo, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(strings.TrimSpace(string(repo)))
	dir := filepath.Join(t.TempDir(), "limen-oci")
	const version = "v0.0.0-imagetest"
	if err := oci.Build(root, dir, "limen:"+version, version); err != nil {
		t.Fatal(err)
	}
	rootfs := t.TempDir()
	img, err := oci.Unpack(dir, rootfs)
	if err != nil {
		t.Fatalf("unpack the layout: %v", err)
	}
	t.Logf("image %s: layer %d bytes compressed, %d files", img.Ref, img.Manifest.Layers[0].Size, len(img.Files))

	if img.Config.Config.User != "65532:65532" {
		t.Errorf("User = %q, want the nonroot 65532:65532", img.Config.Config.User)
	}
	if img.Config.OS != "linux" || len(img.Config.Config.Entrypoint) != 1 {
		t.Fatalf("config: os %q entrypoint %q, want linux and one path", img.Config.OS, img.Config.Config.Entrypoint)
	}
	for _, f := range img.Files {
		if base := filepath.Base(f); slices.Contains([]string{"sh", "bash", "ash", "dash", "busybox"}, base) {
			t.Errorf("the image holds a shell: /%s", f)
		}
	}
	entry := filepath.Join(rootfs, img.Config.Config.Entrypoint[0])
	ef, err := elf.Open(entry)
	if err != nil {
		t.Fatalf("entrypoint %s: %v", img.Config.Config.Entrypoint[0], err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("entrypoint is dynamically linked (PT_INTERP): a distroless static base has no libc")
		}
	}
	ef.Close()

	out, err := exec.Command(entry, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", img.Config.Config.Entrypoint[0], err, out)
	}
	if !strings.HasPrefix(string(out), "limen "+version+"\n") {
		t.Fatalf("%s version printed %q, want it to start with %q", img.Config.Config.Entrypoint[0], out, "limen "+version)
	}
}
