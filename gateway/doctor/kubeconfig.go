package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/limenhq/limen/gateway/profile"
)

// ProfileKubeconfigs are the kubeconfigs `limen kube login` wrote in p's
// directory.
func ProfileKubeconfigs(p *profile.Profile) []string {
	files, _ := filepath.Glob(p.KubeconfigPath("*"))
	return files
}

// DefaultKubeconfigs are the files kubectl reads: those of KUBECONFIG, or
// ~/.kube/config.
func DefaultKubeconfigs() []string {
	return clientcmd.NewDefaultClientConfigLoadingRules().GetLoadingPrecedence()
}

// Kubeconfigs finds, in files, every user whose credential is the limen exec
// plugin and checks that kubectl can run its command: a path must be an
// executable file, a bare name must be found on PATH (with lookPath; nil:
// exec.LookPath). Files that do not exist are passed over, as kubectl does.
func Kubeconfigs(files []string, lookPath func(string) (string, error)) []Result {
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	var out []Result
	seen := map[string]bool{}
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil || seen[abs] {
			continue
		}
		seen[abs] = true
		cfg, err := clientcmd.LoadFromFile(abs)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil {
			err = clientcmd.ResolveLocalPaths(cfg)
		}
		if err != nil {
			out = append(out, fail("kubeconfig", abs+" cannot be read: "+err.Error(), "repair or remove the file (limen kube login CLUSTER writes a fresh one)"))
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(cfg.AuthInfos)) {
			ai := cfg.AuthInfos[name]
			if !isLimenPlugin(ai.Exec) {
				continue
			}
			r := plugin(ai.Exec.Command, lookPath)
			r.Found = abs + " user " + name + ": " + r.Found
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		out = append(out, warn("kubeconfig", "no kubeconfig uses the limen plugin (looked in "+strings.Join(files, ", ")+")",
			"run limen kube login CLUSTER and export the KUBECONFIG it prints"))
	}
	return out
}

// isLimenPlugin reports whether e runs `limen kube credentials`.
func isLimenPlugin(e *clientcmdapi.ExecConfig) bool {
	if e == nil {
		return false
	}
	base := strings.TrimSuffix(filepath.Base(e.Command), ".exe")
	return base == "limen" || len(e.Args) >= 2 && e.Args[0] == "kube" && e.Args[1] == "credentials"
}

// plugin checks that command resolves to an executable file, as kubectl
// will resolve it.
func plugin(command string, lookPath func(string) (string, error)) Result {
	fix := "run limen kube login CLUSTER again with the limen you use now; it writes that binary's path"
	if !strings.ContainsRune(command, filepath.Separator) {
		path, err := lookPath(command)
		if err != nil {
			return fail("kubeconfig", fmt.Sprintf("the plugin command %q is not on PATH (%v)", command, err), fix)
		}
		return ok("kubeconfig", "the plugin %q resolves to %s", command, path)
	}
	fi, err := os.Stat(command)
	switch {
	case err != nil:
		return fail("kubeconfig", fmt.Sprintf("the plugin command %s is missing (%v)", command, err), fix)
	case !fi.Mode().IsRegular():
		return fail("kubeconfig", fmt.Sprintf("the plugin command %s is not a file", command), fix)
	case fi.Mode().Perm()&0o111 == 0:
		return fail("kubeconfig", fmt.Sprintf("the plugin command %s is not executable (mode %04o)", command, fi.Mode().Perm()),
			"run chmod +x "+command+", or "+fix)
	}
	return ok("kubeconfig", "the plugin %s resolves", command)
}
