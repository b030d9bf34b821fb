package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limenhq/limen/test/cluster/clustertest"
)

// The matrix's JavaScript client: @kubernetes/client-node, the official
// one, at the version test/e2e/testdata/client-node pins with its whole
// dependency tree (package-lock.json, with each package's integrity). It
// is 1.4.0 because 2.0.x depends on undici 8, which needs Node 22.19 and
// fails at import on Node 20 (no zlib zstd); Debian's nodejs is 20.
// The client honours tls-server-name, on requests and on WebSocket
// upgrades alike, so its rows use the default kubeconfig of limen kube
// login (server-name).

// clientNodeVersion is the pinned @kubernetes/client-node.
const clientNodeVersion = "1.4.0"

// clientNodeEnv names a directory holding node_modules/@kubernetes/client-node
// to use instead of installing the pinned one.
const clientNodeEnv = "LIMEN_CLIENT_NODE"

var clientNode struct {
	once        sync.Once
	module, why string // the client's entry module; or why there is none
	fail        bool   // why is a failure, not a skip
}

// clientNodeModule returns the file URL of the client's entry module,
// installing it once per test binary into
// ~/.cache/limen/npm/client-node-VERSION-HASH (HASH: of package.json and
// the lock, so that a new pin installs afresh), as test/cluster caches its
// builds. Without node and npm the row is skipped with the reason; a
// failed install fails it with npm's output.
func clientNodeModule(t *testing.T) string {
	t.Helper()
	clientNode.once.Do(func() { clientNode.module, clientNode.why, clientNode.fail = installClientNode() })
	switch {
	case clientNode.module != "":
		return clientNode.module
	case clientNode.fail:
		t.Fatal(clientNode.why)
	default:
		skipRow(t, "%s", clientNode.why)
	}
	return ""
}

func installClientNode() (module, why string, fail bool) {
	entry := func(dir string) string {
		return filepath.Join(dir, "node_modules", "@kubernetes", "client-node", "dist", "index.js")
	}
	if d := os.Getenv(clientNodeEnv); d != "" {
		if _, err := os.Stat(entry(d)); err != nil {
			return "", fmt.Sprintf("%s=%s: no @kubernetes/client-node there: %v", clientNodeEnv, d, err), true
		}
		return (&url.URL{Scheme: "file", Path: entry(d)}).String(), "", false
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", tool + " is not installed: the JavaScript client cannot run (install nodejs and npm, as .ci/run does)", false
		}
	}
	src, err := filepath.Abs(filepath.Join("testdata", "client-node"))
	if err != nil {
		return "", err.Error(), true
	}
	h := sha256.New()
	files := []string{"package.json", "package-lock.json"}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", fmt.Sprintf("the pin of @kubernetes/client-node: %v", err), true
		}
		h.Write(b)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Sprintf("no user cache directory for @kubernetes/client-node (set %s to an installed copy): %v", clientNodeEnv, err), true
	}
	dir := filepath.Join(base, "limen", "npm", "client-node-"+clientNodeVersion+"-"+hex.EncodeToString(h.Sum(nil))[:12])
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return (&url.URL{Scheme: "file", Path: entry(dir)}).String(), "", false
	}
	// Install beside the cache entry and rename it into place when whole,
	// so that an interrupted install or a second test binary never sees
	// half of one.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Sprintf("create the npm cache: %v", err), true
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".installing-")
	if err != nil {
		return "", fmt.Sprintf("create the npm cache: %v", err), true
	}
	defer os.RemoveAll(tmp)
	for _, f := range files {
		b, _ := os.ReadFile(filepath.Join(src, f))
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o644); err != nil {
			return "", err.Error(), true
		}
	}
	fmt.Fprintf(os.Stderr, "compat: installing @kubernetes/client-node@%s with npm ci into %s (once; later runs reuse it)\n", clientNodeVersion, dir)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--prefix", tmp)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Sprintf("npm ci for @kubernetes/client-node@%s (test/e2e/testdata/client-node) failed: %v; "+
			"the npm registry must be reachable, or set %s to a directory where it is installed:\n%s",
			clientNodeVersion, err, clientNodeEnv, out), true
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), []byte(clientNodeVersion+"\n"), 0o644); err != nil {
		return "", err.Error(), true
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, ".complete")); serr != nil {
			return "", fmt.Sprintf("move the installed client into %s: %v", dir, err), true
		}
		// Another test binary installed it meanwhile.
	}
	fmt.Fprintf(os.Stderr, "compat: installed @kubernetes/client-node@%s in %s\n", clientNodeVersion, time.Since(start).Round(time.Second))
	return (&url.URL{Scheme: "file", Path: entry(dir)}).String(), "", false
}

func jsRows() []compatRow {
	return []compatRow{
		{"VersionApi getCode", jsVersionRow},
		{"list", jsListRow},
		{"watch", jsWatchRow},
		{"exec", jsExecRow},
	}
}

// jsPrelude loads the client from argv[2] and the kubeconfig from
// argv[3]; argv[4] is the namespace. A failure prints the API's answer
// (status and body) and exits 2.
const jsPrelude = `
const k8s = await import(process.argv[2]);
const kc = new k8s.KubeConfig();
kc.loadFromFile(process.argv[3]);
const ns = process.argv[4];
const core = kc.makeApiClient(k8s.CoreV1Api);
process.on('unhandledRejection', (e) => {
  console.log('error=' + (e && e.code ? 'status ' + e.code + ' body ' + JSON.stringify(e.body) : String(e && e.stack || e)));
  process.exit(2);
});
`

// runJS runs script after jsPrelude with the default kubeconfig and ns
// (and extra arguments) and returns its output, failing the row if node
// fails.
func runJS(t *testing.T, c compatCase, script string, args ...string) string {
	t.Helper()
	module := clientNodeModule(t)
	file := filepath.Join(c.dir, "row.mjs")
	if err := os.WriteFile(file, []byte(jsPrelude+script), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "node", append([]string{file, module, c.kubeconfig, c.ns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("@kubernetes/client-node %s: %v\n%s", clientNodeVersion, err, out)
	}
	t.Logf("@kubernetes/client-node %s: %s", clientNodeVersion, strings.TrimSpace(string(out)))
	return string(out)
}

// jsVersionRow: VersionApi.getCode. Its generated code names /version/,
// as the API's OpenAPI document does, but 1.4.0's RequestContext.getUrl
// drops a URL's trailing slash, so it sends GET /version (seen in the
// audit trail): the trailing-slash rule is the Python client's row to
// prove.
func jsVersionRow(t *testing.T, c compatCase) {
	out := runJS(t, c, `
const v = await kc.makeApiClient(k8s.VersionApi).getCode();
console.log('version=' + v.gitVersion);
`)
	if !strings.Contains(out, "version=v1.") {
		t.Fatalf("@kubernetes/client-node %s VersionApi: %s", clientNodeVersion, out)
	}
}

// jsListRow creates a ConfigMap, reads it back and lists the namespace's
// ConfigMaps.
func jsListRow(t *testing.T, c compatCase) {
	out := runJS(t, c, `
await core.createNamespacedConfigMap({namespace: ns, body: {metadata: {name: 'from-js'}, data: {k: 'js'}}});
const got = await core.readNamespacedConfigMap({name: 'from-js', namespace: ns});
const list = await core.listNamespacedConfigMap({namespace: ns});
console.log('value=' + got.data.k + ' names=' + list.items.map((cm) => cm.metadata.name).join(','));
`)
	if !strings.Contains(out, "value=js") || !strings.Contains(out, "from-js") {
		t.Fatalf("@kubernetes/client-node %s list: %s", clientNodeVersion, out)
	}
}

// jsWatchRow: a watch from a list's resourceVersion delivers, as ADDED, the
// ConfigMap created after the list.
func jsWatchRow(t *testing.T, c compatCase) {
	out := runJS(t, c, `
const rv = (await core.listNamespacedConfigMap({namespace: ns})).metadata.resourceVersion;
await core.createNamespacedConfigMap({namespace: ns, body: {metadata: {name: 'js-watched'}}});
setTimeout(() => { console.log('no ADDED event within 30s'); process.exit(3); }, 30000);
await new k8s.Watch(kc).watch('/api/v1/namespaces/' + ns + '/configmaps', {resourceVersion: rv},
  (type, obj) => {
    console.log('event=' + type + '/' + obj.metadata.name);
    if (type === 'ADDED' && obj.metadata.name === 'js-watched') {
      console.log('watched');
      process.exit(0);
    }
  },
  (err) => { if (err && err.name !== 'AbortError') { console.log('watch ended: ' + err); process.exit(2); } });
`)
	if !strings.Contains(out, "event=ADDED/js-watched") || !strings.Contains(out, "watched") {
		t.Fatalf("@kubernetes/client-node %s watch: no ADDED event for js-watched: %s", clientNodeVersion, out)
	}
}

// jsExecRow: Exec over WebSocket (v5.channel.k8s.io, which closes stdin):
// the input reaches cat, and stdout, stderr and the exit code come back
// apart.
func jsExecRow(t *testing.T, c compatCase) {
	clustertest.RunPod(t, c.ns, "js-shell", []string{"sleep", "infinity"}, false)
	out := runJS(t, c, `
const { Readable, Writable } = await import('node:stream');
const sink = () => { const s = {text: ''}; s.w = new Writable({write(chunk, enc, cb) { s.text += chunk; cb(); }}); return s; };
const stdout = sink(), stderr = sink();
let status;
const ws = await new k8s.Exec(kc).exec(ns, process.argv[5], process.argv[5], ['sh', '-c', 'cat; echo to-stderr >&2; exit 3'],
  stdout.w, stderr.w, Readable.from(['through stdin\n']), false, (s) => { status = s; });
const timer = setTimeout(() => { console.log('exec did not end within 60s'); process.exit(3); }, 60000);
ws.on('close', () => {
  clearTimeout(timer);
  const code = status && status.status === 'Success' ? 0 :
    Number(((status && status.details && status.details.causes) || []).find((c) => c.reason === 'ExitCode')?.message);
  console.log(JSON.stringify({protocol: ws.protocol, stdout: stdout.text, stderr: stderr.text, rc: code}));
  process.exit(0);
});
`, "js-shell")
	var got struct {
		Protocol, Stdout, Stderr string
		RC                       int
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("@kubernetes/client-node %s exec: %s", clientNodeVersion, out)
	}
	if got.Stdout != "through stdin\n" || got.Stderr != "to-stderr\n" || got.RC != 3 {
		t.Fatalf("@kubernetes/client-node %s exec over %s: %+v; want the input, to-stderr and exit 3", clientNodeVersion, got.Protocol, got)
	}
}
