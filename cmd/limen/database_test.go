package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/viper"

	"github.com/limenhq/limen/gateway/doctor"
	pgtest "github.com/limenhq/limen/test/postgres"
)

func TestDatabaseConfig(t *testing.T) {
	const secret = "s3cret-pw"
	tests := []struct {
		name, url, file string
		err             string // "" means valid
	}{
		{"none", "", "", ""},
		{"postgres", "postgres://limen:" + secret + "@db.example:5432/limen?sslmode=verify-full", "", ""},
		{"postgresql and a file", "postgresql://limen@db.example/limen", "/run/secrets/pw", ""},
		{"file without url", "", "/run/secrets/pw", "database-password-file: set only with database-url"},
		{"mysql", "mysql://limen:" + secret + "@db.example/limen", "", "database-url: want postgres://"},
		{"no host", "postgres:///limen", "", "database-url: want postgres://"},
		{"no database", "postgres://limen:" + secret + "@db.example:5432", "", "database-url: name the database"},
		{"not a url", "postgres://limen:" + secret + "@db.example:port/x", "", "database-url: want postgres://"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := viper.New()
			v.Set("database-url", tt.url)
			v.Set("database-password-file", tt.file)
			_, err := loadDatabaseConfig(v)
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("valid config refused: %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("got %v, want an error containing %q", err, tt.err)
			case err != nil && strings.Contains(err.Error(), secret):
				t.Fatalf("the error repeats the password: %v", err)
			}
		})
	}
}

// TestCLIOnPostgres: with LIMEN_DATABASE_URL and a shared --ca-dir, two
// proxies, limen users --local and limen audit search all use the one
// PostgreSQL database: the first admin made with --local logs in through
// either proxy, which print one CA fingerprint; a user added through one
// proxy is listed by the other and by --local from another host's empty
// data directory; the change is found by audit search (flag, environment
// and config file key alike), and no SQLite store is created.
func TestCLIOnPostgres(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.Database(t)
	keys := filepath.Join(t.TempDir(), "ca")
	kh := &harness{t: t, home: t.TempDir()}
	if out := kh.ok("keys init", "proxy", "keys", "init", "--ca-dir", keys); !strings.Contains(out, "CA fingerprint: sha256:") {
		t.Fatalf("keys init: %q", out)
	}
	env := []string{"LIMEN_DATABASE_URL=" + url, "LIMEN_CA_DIR=" + keys}
	// Without the shared keys, a proxy on a database refuses to start.
	if msg := (&harness{t: t, home: t.TempDir(), extra: env[:1]}).fails("proxy", "--data-dir", t.TempDir()); !strings.Contains(msg, "ca-dir: required with database-url") {
		t.Fatalf("proxy on a database without ca-dir: %q", msg)
	}
	h := newHarnessEnv(t, env...)
	h.login("root", adminPassword)
	h.ok("add", "users", "add", "carol", "--password-stdin", "carol-password\n")
	b := &harness{t: t, home: filepath.Join(t.TempDir(), "home"), data: filepath.Join(t.TempDir(), "data"), extra: env}
	b.startProxy()
	if b.fp != h.fp {
		t.Fatalf("the proxies print fingerprints %s and %s: they must share one CA", h.fp, b.fp)
	}
	b.login("root", adminPassword)
	if out := b.ok("ls through the other proxy", "users", "ls"); !strings.Contains(out, "carol") {
		t.Fatalf("users ls through the second proxy: %q", out)
	}
	elsewhere := t.TempDir()
	if out := h.ok("ls", "users", "ls", "--local", "--data-dir", elsewhere); !strings.Contains(out, "carol") || !strings.Contains(out, "root") {
		t.Fatalf("users ls --local on the database: %q", out)
	}
	for _, name := range []string{"users.db", "audit.db", "tokens.db", "locks.db", "bots.db"} {
		if _, err := os.Stat(filepath.Join(h.data, name)); err == nil {
			t.Errorf("%s created in the data directory: the stores are in the database", name)
		}
	}
	withFlag, errOut, err := (&harness{t: t, home: h.home}).run("audit", "search", "--database-url", url, "--type", "user.add", "--json")
	if err != nil || strings.Count(withFlag, "\n") != 2 || !strings.Contains(withFlag, "carol") {
		t.Fatalf("audit search --database-url: %v %s\n%s", err, errOut, withFlag)
	}
	cfg := filepath.Join(t.TempDir(), "limen.yaml")
	if err := os.WriteFile(cfg, []byte("database-url: "+url+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fromFile, errOut, err := (&harness{t: t, home: h.home}).run("audit", "search", "--config", cfg, "--type", "user.add", "--json")
	if err != nil || fromFile != withFlag {
		t.Fatalf("audit search with database-url in the config file: %v %s\n%s", err, errOut, fromFile)
	}
	status := h.ok("status", "proxy", "status", "--data-dir", h.data)
	if !strings.Contains(status, "Audit database:  postgres://limen@127.0.0.1:") || !strings.Contains(status, "events") ||
		strings.Contains(status, pgtest.Password) {
		t.Fatalf("proxy status on the database:\n%s", status)
	}
	report := h.doctor(false, "proxy", "--data-dir", h.data)
	doctorLine(t, report, "audit", doctor.OK, "postgres://limen@127.0.0.1:", "events")
	if msg := h.fails("audit", "search", "--database-url", "mysql://x/y"); !strings.Contains(msg, "database-url") {
		t.Fatalf("a bad URL: %q", msg)
	}
}
