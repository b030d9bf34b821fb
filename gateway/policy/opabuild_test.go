package policy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/limenhq/limen/bundles"
)

// TestOPABuildBundle signs a bundle with OPA's own CLI, as `make bundle`
// does, and activates it: the security team's workflow end to end.
func TestOPABuildBundle(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go tool opa build")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("the go command is needed to run go tool opa build: %v", err)
	}
	src := t.TempDir()
	for name, body := range defaultRego(t) {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "data.json"), bundles.ExampleData(), 0o600); err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	out := filepath.Join(t.TempDir(), "bundle.tar.gz")
	cmd := exec.Command("go", "tool", "opa", "build", "--bundle", src, "--revision", "20250131235959",
		"--signing-key", filepath.Join(root, "bundles", "testkeys", "TEST-ONLY-signing-key.pem"), "-o", out)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("opa build: %v\n%s", err, b)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	_, pub := testKeys(t)
	e, err := New(context.Background(), Options{Bundle: raw, PublicKeyPEM: pub, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	d, err := e.Groups(context.Background(), alice, demo)
	if err != nil || d.Revision != "20250131235959" || len(d.Groups) != 2 {
		t.Fatalf("Groups = %+v, %v", d, err)
	}
}
