package profile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"log/slog"

	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/identity"
)

func TestCheckProxy(t *testing.T) {
	for in, ok := range map[string]bool{
		"limen.example.com:443": true, "127.0.0.1:8443": true, "[::1]:8443": true, "localhost:1": true,
		"": false, "limen.example.com": false, ":443": false, "host:0": false, "host:65536": false, "host:http": false,
		"../../etc:443": false, "a/b:443": false, "a..b:443": false, "host\n:443": false, "ho st:443": false, "%2e%2e:443": false,
	} {
		if err := CheckProxy(in); (err == nil) != ok {
			t.Errorf("CheckProxy(%q) = %v, want ok=%v", in, err, ok)
		}
	}
}

func TestDirNameHasNoColon(t *testing.T) {
	p, err := Open("/home/u/.limen", "[::1]:8443")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(filepath.Base(p.Dir), ":") || filepath.Dir(p.Dir) != "/home/u/.limen" {
		t.Fatalf("profile dir %q", p.Dir)
	}
}

func TestCurrentHostile(t *testing.T) {
	home := t.TempDir()
	if _, err := Current(home); err == nil || !strings.Contains(err.Error(), "limen login") {
		t.Fatalf("no current file: %v", err)
	}
	for _, content := range []string{"", "../../x:1", "host", "a/b:1\n"} {
		os.WriteFile(filepath.Join(home, fileCurrent), []byte(content), 0o600)
		if p, err := Current(home); err == nil {
			t.Errorf("Current with %q = %q, want error", content, p)
		}
	}
	if err := SetCurrent(home, "limen.example.com:443"); err != nil {
		t.Fatal(err)
	}
	if p, err := Current(home); err != nil || p != "limen.example.com:443" {
		t.Fatalf("Current = %q, %v", p, err)
	}
}

// stored logs in without a network: a certificate from a real CA for a
// fresh key, saved in a new profile.
func stored(t *testing.T, skew time.Duration) (*Profile, *ca.Authority) {
	t.Helper()
	authority, err := ca.Open(ca.Options{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
		Now: func() time.Time { return time.Now().Add(skew) }})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ca.NewKey()
	cert, err := authority.IssueUser(key.Public(), identity.Principal{Kind: identity.KindUser, Name: "alice"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := Open(filepath.Join(t.TempDir(), "home"), "127.0.0.1:8443")
	keyPEM, _ := ca.KeyPEM(key)
	if err := p.SaveCredentials(keyPEM, ca.CertPEM(cert.Raw), authority.RootPEM()); err != nil {
		t.Fatal(err)
	}
	return p, authority
}

func TestCredentialsHostileFiles(t *testing.T) {
	tests := []struct {
		name  string
		setup func(p *Profile)
		want  string
	}{
		{"fine", func(*Profile) {}, ""},
		{"key group-readable", func(p *Profile) { os.Chmod(p.path(FileKey), 0o640) }, "chmod 600"},
		{"cert world-readable", func(p *Profile) { os.Chmod(p.path(FileCert), 0o604) }, "chmod 600"},
		{"dir open", func(p *Profile) { os.Chmod(p.Dir, 0o711) }, "chmod 700"},
		{"key missing", func(p *Profile) { os.Remove(p.path(FileKey)) }, "not logged in"},
		{"cert is a directory", func(p *Profile) { os.Remove(p.path(FileCert)); os.Mkdir(p.path(FileCert), 0o700) }, "not a regular file"},
		{"key is a symlink", func(p *Profile) {
			os.Rename(p.path(FileKey), p.path("elsewhere"))
			os.Symlink(p.path("elsewhere"), p.path(FileKey))
		}, "symbolic link"},
		{"huge cert", func(p *Profile) { os.WriteFile(p.path(FileCert), make([]byte, 70<<10), 0o600) }, "64 KiB"},
		{"garbage cert", func(p *Profile) { os.WriteFile(p.path(FileCert), []byte("hello"), 0o600) }, "damaged"},
		{"key of another cert", func(p *Profile) {
			k, _ := ca.NewKey()
			b, _ := ca.KeyPEM(k)
			os.WriteFile(p.path(FileKey), b, 0o600)
		}, "damaged"},
		{"profile dir is a file", func(p *Profile) { os.RemoveAll(p.Dir); os.WriteFile(p.Dir, nil, 0o600) }, "not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := stored(t, 0)
			tt.setup(p)
			c, err := p.Credentials(time.Now())
			if tt.want == "" {
				if err != nil || c.Principal.Name != "alice" {
					t.Fatalf("Credentials = %+v, %v", c, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Credentials error %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestCredentialsExpired(t *testing.T) {
	p, _ := stored(t, -9*time.Hour)
	_, err := p.Credentials(time.Now())
	if err == nil || !strings.Contains(err.Error(), "expired") || !strings.Contains(err.Error(), "run limen login --proxy 127.0.0.1:8443") {
		t.Fatalf("expired: %v", err)
	}
}

func TestSaveModesAndLogout(t *testing.T) {
	p, _ := stored(t, 0)
	if fi, _ := os.Stat(p.Dir); fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v", fi.Mode())
	}
	for _, f := range []string{FileKey, FileCert, FileCA} {
		if fi, _ := os.Stat(p.path(f)); fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s mode %v", f, fi.Mode())
		}
	}
	if removed, err := p.Logout(); !removed || err != nil {
		t.Fatalf("Logout = %v, %v", removed, err)
	}
	if _, err := os.Stat(p.path(FileCA)); err != nil {
		t.Fatal("logout removed the CA; the next login would lose its trust anchor")
	}
	if removed, _ := p.Logout(); removed {
		t.Fatal("second logout removed something")
	}
}

func TestServerName(t *testing.T) {
	for proxy, want := range map[string]string{
		"127.0.0.1:8443":        "prod.kube.127.0.0.1",
		"Limen.Example.com:443": "prod.kube.limen.example.com",
		"localhost:8443":        "prod.kube.localhost",
		"[::1]:8443":            "", // an IPv6 literal cannot end a DNS name
		"no-port.example.com":   "",
	} {
		got, err := ServerName(proxy, "prod")
		if got != want || (err == nil) != (want != "") {
			t.Errorf("ServerName(%q) = %q, %v; want %q", proxy, got, err, want)
		}
	}
}
