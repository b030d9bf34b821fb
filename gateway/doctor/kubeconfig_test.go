package doctor

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes a kubeconfig whose users run the given exec
// commands (nil: a token user) and returns its path.
func writeKubeconfig(t *testing.T, dir, name string, users map[string]*clientcmdapi.ExecConfig) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	for u, e := range users {
		ai := clientcmdapi.NewAuthInfo()
		if e == nil {
			ai.Token = "secret"
		}
		ai.Exec = e
		cfg.AuthInfos[u] = ai
	}
	path := filepath.Join(dir, name)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func limenExec(command string) *clientcmdapi.ExecConfig {
	return &clientcmdapi.ExecConfig{Command: command, Args: []string{"kube", "credentials", "--proxy", "p:443"},
		APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
}

// TestKubeconfigs: every user whose credential is the limen plugin is
// checked, in every file; a missing, non-executable or not-on-PATH command
// fails, a relative path is resolved against the kubeconfig's directory as
// kubectl does, unreadable files fail, absent files are passed over, and
// no limen user at all warns.
func TestKubeconfigs(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(bin, "limen")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	noExec := filepath.Join(bin, "limen-copy")
	if err := os.WriteFile(noExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	garbled := filepath.Join(dir, "garbled")
	if err := os.WriteFile(garbled, []byte("{not yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		users  map[string]*clientcmdapi.ExecConfig
		file   string // instead of users
		status []Status
		words  string
	}{
		{name: "absolute path", users: map[string]*clientcmdapi.ExecConfig{"u": limenExec(exe)}, status: []Status{OK}, words: "resolves"},
		{name: "on PATH", users: map[string]*clientcmdapi.ExecConfig{"u": limenExec("limen")}, status: []Status{OK}, words: "resolves to " + exe},
		{name: "relative to the kubeconfig", users: map[string]*clientcmdapi.ExecConfig{"u": limenExec("./bin/limen")}, status: []Status{OK}, words: exe},
		{name: "missing", users: map[string]*clientcmdapi.ExecConfig{"u": limenExec(filepath.Join(dir, "gone", "limen"))}, status: []Status{Fail}, words: "missing"},
		{name: "not executable", users: map[string]*clientcmdapi.ExecConfig{"u": limenExec(noExec)}, status: []Status{Fail}, words: "not executable"},
		{name: "not on PATH", users: map[string]*clientcmdapi.ExecConfig{"u": {Command: "limen-old", Args: []string{"kube", "credentials"}}},
			status: []Status{Fail}, words: "not on PATH"},
		{name: "several users, only limen's checked", users: map[string]*clientcmdapi.ExecConfig{"a": limenExec(exe), "b": nil,
			"c": {Command: "gke-gcloud-auth-plugin"}, "d": limenExec(filepath.Join(dir, "gone"))}, status: []Status{OK, Fail}, words: "user"},
		{name: "no limen user", users: map[string]*clientcmdapi.ExecConfig{"b": nil}, status: []Status{Warn}, words: "no kubeconfig uses the limen plugin"},
		{name: "unreadable", file: garbled, status: []Status{Fail}, words: "cannot be read"},
		{name: "absent", file: filepath.Join(dir, "absent"), status: []Status{Warn}, words: "no kubeconfig uses"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := tt.file
			if file == "" {
				file = writeKubeconfig(t, dir, "config-"+string(rune('a'+i)), tt.users)
			}
			got := Kubeconfigs([]string{file, file}, nil) // listed twice, checked once
			if len(got) != len(tt.status) {
				t.Fatalf("got %d results, want %d: %+v", len(got), len(tt.status), got)
			}
			for j, r := range got {
				wantResult(t, r, tt.status[j])
			}
			wantResult(t, got[len(got)-1], tt.status[len(got)-1], tt.words)
		})
	}
}
