package ca

import (
	"crypto/x509"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

// snapshot is every file of dir with its size and modification time.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = fi.ModTime().String() + " " + fi.Mode().String()
	}
	return out
}

// TestSharedKeys: two proxies given one keys directory (made by InitKeys)
// share the root and the grant key, so a user certificate one issues is a
// client certificate the other accepts; each has a serving certificate of
// its own; neither writes to the keys directory (a read-only Secret).
func TestSharedKeys(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys")
	fp, err := InitKeys(keys, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"root.key", "user.key", "worker.key", "grant.key"} {
		if fi, err := os.Stat(filepath.Join(keys, name)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want mode 0600", name, fi, err)
		}
	}
	if _, err := os.Stat(filepath.Join(keys, "server.key")); err == nil {
		t.Fatal("InitKeys wrote a serving key: it is per proxy")
	}
	before := snapshot(t, keys)
	a := openCA(t, Options{KeysDir: keys})
	b := openCA(t, Options{KeysDir: keys})
	if a.Fingerprint() != fp || b.Fingerprint() != fp || !a.GrantPublicKey().Equal(b.GrantPublicKey()) {
		t.Fatal("the proxies do not share the root and the grant key")
	}
	if a.ServingCertificate().Leaf.Equal(b.ServingCertificate().Leaf) {
		t.Fatal("the proxies share a serving certificate; it is per proxy")
	}
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := a.IssueUser(key.Public(), identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "alice"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: b.ClientCAs(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("proxy b does not accept the certificate proxy a issued: %v", err)
	}
	if after := snapshot(t, keys); len(after) != len(before) {
		t.Fatalf("Open wrote to the keys directory: %v, was %v", after, before)
	} else {
		for k, v := range before {
			if after[k] != v {
				t.Fatalf("Open changed %s in the keys directory", k)
			}
		}
	}
	// Running InitKeys again keeps what is there.
	if again, err := InitKeys(keys, Options{Logger: slog.New(slog.DiscardHandler)}); err != nil || again != fp {
		t.Fatalf("second InitKeys: %s %v, want the same root %s", again, err, fp)
	}
}

// TestSharedKeysNeverGenerated: a proxy given an empty or incomplete keys
// directory refuses to start rather than make a CA of its own, and says
// how to make the directory.
func TestSharedKeysNeverGenerated(t *testing.T) {
	for _, missing := range []string{"", "root.crt", "worker.key", "grant.key"} {
		keys := t.TempDir()
		if missing != "" {
			if _, err := InitKeys(keys, Options{Logger: slog.New(slog.DiscardHandler)}); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(keys, missing)); err != nil {
				t.Fatal(err)
			}
		}
		before := snapshot(t, keys)
		_, err := Open(Options{DataDir: t.TempDir(), KeysDir: keys, Logger: slog.New(slog.DiscardHandler)})
		if err == nil || !strings.Contains(err.Error(), "limen proxy keys init") {
			t.Fatalf("without %q: %v, want a refusal naming limen proxy keys init", missing, err)
		}
		if after := snapshot(t, keys); len(after) != len(before) {
			t.Fatalf("without %q: Open wrote to the keys directory", missing)
		}
	}
}
