package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/limenhq/limen/deploy/image/oci"
	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/cluster/controlplane"
	"github.com/limenhq/limen/test/gatewaytest"
)

// The Helm chart (deploy/helm/limen) and the image (deploy/image), proven
// against the real API server: every value set of the chart's ci/ applied
// with --dry-run=server, the RBAC it renders equal to deploy/kube's, and
// the worker it renders run as a pod of the image, configured by nothing
// but the in-cluster defaults, across ServiceAccount token rotations.

func repoDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// helm returns bin/helm, built by make bin/helm from tools/go.mod.
func helm(t *testing.T) string {
	t.Helper()
	p := filepath.Join(repoDir(t), "bin", "helm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v; build it with make bin/helm (make test does)", p, err)
	}
	return p
}

func chartDir(t *testing.T) string { return filepath.Join(repoDir(t), "deploy", "helm", "limen") }

// helmTemplate renders the chart; it fails the test on an error unless
// wantErr, and returns stdout and stderr.
func helmTemplate(t *testing.T, namespace string, wantErr bool, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helm(t), append([]string{"template", "limen", chartDir(t), "--namespace", namespace}, args...)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if (err != nil) != wantErr {
		t.Fatalf("helm template %v: err %v (want error: %v)\n%s", args, err, wantErr, errb.String())
	}
	return out.String(), errb.String()
}

// adminKubectl runs kubectl as the control plane's admin.
func adminKubectl(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	c := clustertest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, controlplane.KubectlPath(c), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// restrictedNamespace is a fresh namespace whose Pod Security admission
// enforces, and warns about, the restricted profile.
func restrictedNamespace(t *testing.T) string {
	t.Helper()
	ns := clustertest.Namespace(t)
	if _, errb, err := adminKubectl(t, "", "label", "namespace", ns,
		"pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/warn=restricted"); err != nil {
		t.Fatalf("label namespace %s: %v\n%s", ns, err, errb)
	}
	return ns
}

// TestChartDryRunServer renders the chart for every value set in its ci/
// directory and has the API server validate each render (apply
// --dry-run=server) in a namespace under the restricted Pod Security
// profile: any object the API server refuses, and any warning (a pod
// template the profile would reject, a deprecated API), fails.
func TestChartDryRunServer(t *testing.T) {
	sets, err := filepath.Glob(filepath.Join(chartDir(t), "ci", "*.yaml"))
	if err != nil || len(sets) < 3 {
		t.Fatalf("want at least 3 value sets in %s/ci, have %v (%v)", chartDir(t), sets, err)
	}
	ns := restrictedNamespace(t)
	for _, set := range sets {
		t.Run(strings.TrimSuffix(filepath.Base(set), ".yaml"), func(t *testing.T) {
			manifest, _ := helmTemplate(t, ns, false, "-f", set)
			kinds := renderedKinds(t, manifest)
			out, errb, err := adminKubectl(t, manifest, "apply", "--dry-run=server", "-n", ns, "-f", "-")
			if err != nil {
				t.Fatalf("kubectl apply --dry-run=server: %v\n%s%s", err, out, errb)
			}
			if strings.Contains(errb, "Warning") {
				t.Fatalf("the API server warned about the render of %s:\n%s", filepath.Base(set), errb)
			}
			if n := strings.Count(out, "(server dry run)"); n != len(kinds) {
				t.Fatalf("the API server validated %d objects of the %d rendered (%v):\n%s", n, len(kinds), kinds, out)
			}
			t.Logf("%s: %d objects validated: %v", filepath.Base(set), len(kinds), kinds)
		})
	}
}

// TestChartSchemaRefuses shows values.schema.json at work: values the chart
// cannot serve are refused at render, with the offending key named.
func TestChartSchemaRefuses(t *testing.T) {
	base := []string{"--set", "worker.cluster=demo", "--set", "worker.proxyAddress=limen.example:443",
		"--set", "worker.joinToken.value=x", "--set", "worker.networkPolicy.apiServer.cidrs={10.0.0.1/32}"}
	_, errb := helmTemplate(t, "limen", false, base...)
	if errb != "" {
		t.Logf("helm: %s", errb)
	}
	// ha is the three-proxy value set of ci/ with one value changed.
	ha := func(set string) []string {
		return []string{"-f", filepath.Join(chartDir(t), "ci", "proxy-ha.yaml"), "--set", set}
	}
	one := func(set string) []string { return []string{"--set", set} }
	for _, bad := range []struct {
		args []string
		key  string
	}{
		{one("worker.rbac.impersonation=both"), "impersonation"},
		{one("worker.rbac.groups={system:masters}"), "groups"},
		{one("worker.config.kube-token-file=/x"), "config"},
		// Several proxies, each with its own SQLite file, would split users,
		// locks and the audit trail: without a database, one proxy.
		{one("proxy.replicas=2"), "/proxy/database"},
		{ha("proxy.database.existingSecret="), "/proxy/database"},
		{ha("proxy.persistence.enabled=true"), "/proxy/persistence/enabled"},
		{ha("proxy.recordings.store="), "/proxy/recordings/store"},
		{ha("proxy.audit.exportFile=/dev/stdout"), "/proxy/audit/exportFile"},
		{ha("proxy.keys.existingSecret="), "/proxy/keys/existingSecret"},
		{one("proxy.database.url=postgres://limen@db.example:5432/limen"), "/proxy/keys/existingSecret"},
		{one("proxy.database.url=mysql://limen@db.example/limen"), "/proxy/database/url"},
		{one("proxy.replicas=0"), "/proxy/replicas"},
		{one("proxy.config.database-url=postgres://limen@db.example:5432/limen"), "/proxy/config"},
		{one("proxy.config.peer-address=10.0.0.1:8443"), "/proxy/config"},
		{one("proxy.recordings.retention=90d"), "retention"},
		{one("proxy.recordings.store=/var/rec"), "store"},
		{one("proxy.audit.retention=forever"), "retention"},
		{one("proxy.audit.exportFile=relative.jsonl"), "exportFile"},
		{one("proxy.config.audit-webhook-config=/x"), "config"},
	} {
		_, errb := helmTemplate(t, "limen", true, append(append([]string(nil), base...), bad.args...)...)
		if !strings.Contains(errb, "values don't meet the specifications of the schema") || !strings.Contains(errb, bad.key) {
			t.Errorf("%v: want a schema refusal naming %q, got:\n%s", bad.args, bad.key, errb)
		}
	}
	// With a database, the keys, a bucket and no volume, several proxies
	// are what the chart serves.
	for _, replicas := range []string{"2", "3"} {
		helmTemplate(t, "limen", false, append(append([]string(nil), base...), ha("proxy.replicas="+replicas)...)...)
	}
	// What only the templates can check: a worker without its proxy.
	_, errb = helmTemplate(t, "limen", true, "--set", "worker.cluster=demo", "--set", "worker.joinToken.value=x")
	if !strings.Contains(errb, "worker.proxyAddress: required") {
		t.Errorf("a worker without proxyAddress: want the chart to say worker.proxyAddress is required, got:\n%s", errb)
	}
	// An audit webhook with neither its Secret nor the file to make one of.
	_, errb = helmTemplate(t, "limen", true, append(base, "--set", "proxy.audit.webhook.enabled=true")...)
	if !strings.Contains(errb, "proxy.audit.webhook: set existingSecret") {
		t.Errorf("a webhook without its configuration: want the chart to name proxy.audit.webhook, got:\n%s", errb)
	}
}

// TestChartRBACMatchesDeployKube renders each worker RBAC variant and finds
// exactly the rules of deploy/kube's manifest for it, so the chart and the
// plain manifests never drift apart.
func TestChartRBACMatchesDeployKube(t *testing.T) {
	for _, v := range []struct{ mode, file string }{{"legacy", "worker-rbac.yaml"}, {"constrained", "worker-rbac-constrained.yaml"}} {
		t.Run(v.mode, func(t *testing.T) {
			manifest, _ := helmTemplate(t, "limen-system", false, "--set", "proxy.enabled=false", "--set", "worker.cluster=demo",
				"--set", "worker.proxyAddress=limen.example:443", "--set", "worker.joinToken.value=x",
				"--set", "worker.networkPolicy.enabled=false", "--set", "worker.rbac.impersonation="+v.mode)
			kube, err := os.ReadFile(filepath.Join(repoDir(t), "deploy", "kube", v.file))
			if err != nil {
				t.Fatal(err)
			}
			got, want := clusterRoleRules(t, manifest), clusterRoleRules(t, string(kube))
			if len(got) == 0 || !reflect.DeepEqual(got, want) {
				t.Fatalf("the chart's %s ClusterRole rules differ from deploy/kube/%s:\nchart: %v\nkube:  %v", v.mode, v.file, got, want)
			}
		})
	}
}

// clusterRoleRules returns the rules of every ClusterRole of a manifest, by
// the role's name without its prefix (the chart's names are per release).
func clusterRoleRules(t *testing.T, manifest string) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, o := range decodeAll(t, manifest) {
		if o["kind"] != "ClusterRole" {
			continue
		}
		name := o["metadata"].(map[string]any)["name"].(string)
		for _, suffix := range []string{"impersonate-constrained", "impersonate", "act-as"} {
			if strings.HasSuffix(name, suffix) {
				out[suffix] = o["rules"]
				break
			}
		}
	}
	return out
}

func decodeAll(t *testing.T, manifest string) []map[string]any {
	t.Helper()
	dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var objs []map[string]any
	for {
		var o map[string]any
		if err := dec.Decode(&o); err != nil {
			if err.Error() == "EOF" {
				return objs
			}
			t.Fatalf("decode the render: %v", err)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
}

func renderedKinds(t *testing.T, manifest string) []string {
	var kinds []string
	for _, o := range decodeAll(t, manifest) {
		kinds = append(kinds, fmt.Sprint(o["kind"]))
	}
	return kinds
}

// tokenCacheTTL bounds how long the API server keeps authenticating a token
// it has seen after the token is revoked: kube-apiserver caches successful
// token authentications for 10 s (TokenSuccessCacheTTL); 5 s more margin.
const tokenCacheTTL = 15 * time.Second

// inClusterRotations is how many ServiceAccount token rotations the
// in-cluster worker must survive.
const inClusterRotations = 2

// TestWorkerPodInCluster runs `limen worker` as a pod from the chart's
// worker Deployment, in the image make image builds: the fake kubelet runs
// the image's entrypoint (unpacked from the OCI layout) with the pod's
// volumes mounted at their paths, the KUBERNETES_SERVICE_* environment and
// a projected ServiceAccount token it refreshes at 80% of its lifetime.
// The worker has no --kube-* flag: API server, CA and token are the
// in-cluster defaults. kubectl works through it; then, twice, the
// ServiceAccount is deleted and recreated, which revokes every token the
// worker holds, and kubectl works again only once the worker reads a token
// the kubelet rotated in afterwards.
func TestWorkerPodInCluster(t *testing.T) {
	c := clustertest.Cluster(t)
	e := extraGateway(t, "a worker that runs as a pod", gatewaytest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const lifetime = 20 * time.Second
	c.Kubelet.SetTokenLifetime(lifetime)
	t.Cleanup(func() { c.Kubelet.SetTokenLifetime(0) })
	ns := restrictedNamespace(t)
	manifest := chartWorker(t, ctx, e, ns)
	for _, o := range decodeAll(t, manifest) {
		for _, flag := range []string{"kube-api-server", "kube-ca-file", "kube-token-file"} {
			if o["kind"] == "ConfigMap" && strings.Contains(fmt.Sprint(o["data"]), flag) {
				t.Fatalf("the worker's config sets %s: the in-cluster default must do: %v", flag, o["data"])
			}
			if o["kind"] == "Deployment" && strings.Contains(fmt.Sprint(o["spec"]), "--"+flag) {
				t.Fatalf("the worker's Deployment passes --%s: the in-cluster default must do", flag)
			}
		}
	}
	applyChart(t, ns, manifest)
	pod := waitWorkerPod(t, ctx, ns)
	if err := e.WaitWorker(ctx, true); err != nil {
		t.Fatalf("%v (pod %s/%s: %s)", err, ns, pod, podLog(c, ns, pod))
	}
	kc := login(t, e, "admin")
	through := func() error {
		out, errb, code := kubectl(t, kc, "", "-n", ns, "get", "pod", pod, "-o", "name")
		if code != 0 || strings.TrimSpace(out) != "pod/"+pod {
			return fmt.Errorf("kubectl get pod through Limen: exit %d, %q %q", code, out, errb)
		}
		return nil
	}
	if err := through(); err != nil {
		t.Fatalf("%v (worker log: %s)", err, podLog(c, ns, pod))
	}

	sa := ""
	for _, o := range decodeAll(t, manifest) {
		if o["kind"] == "ServiceAccount" {
			sa = o["metadata"].(map[string]any)["name"].(string)
		}
	}
	t.Logf("worker pod %s/%s runs; its log:\n%s", ns, pod, podLog(c, ns, pod))
	for r := 1; r <= inClusterRotations; r++ {
		// A token like the worker's, to show the revocation takes.
		before, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		revokeServiceAccount(t, ctx, ns, sa)
		review, err := c.Client.AuthenticationV1().TokenReviews().Create(ctx,
			&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: before.Status.Token}}, metav1.CreateOptions{})
		if err != nil || review.Status.Authenticated {
			t.Fatalf("a token issued before the ServiceAccount was recreated still authenticates (%v): the test proves nothing", err)
		}
		revoked, issued := time.Now(), c.Kubelet.TokensIssued(ns, pod)
		refused := 0
		// The kubelet rotates within 80% of lifetime; the worker re-reads
		// its token file every minute.
		deadline := time.Now().Add(tokenCacheTTL + lifetime + 2*time.Minute)
		var last error
		for time.Now().Before(deadline) {
			// Only a success after the API server's token cache has let go of
			// the revoked tokens counts.
			if last = through(); last == nil && c.Kubelet.TokensIssued(ns, pod) > issued && time.Now().After(revoked.Add(tokenCacheTTL)) {
				break
			}
			if last != nil {
				refused++
			}
			time.Sleep(time.Second)
		}
		if last != nil || c.Kubelet.TokensIssued(ns, pod) <= issued {
			t.Fatalf("rotation %d: kubectl through the in-cluster worker did not recover after its tokens were revoked (tokens issued %d → %d): %v\nworker log: %s",
				r, issued, c.Kubelet.TokensIssued(ns, pod), last, podLog(c, ns, pod))
		}
		t.Logf("rotation %d: kubectl works through the worker with a token issued after the revocation (%d tokens issued so far; kubectl refused %d times while the worker held the revoked one)",
			r, c.Kubelet.TokensIssued(ns, pod), refused)
	}
	t.Logf("token lifetime seen by the kubelet %s (tokens requested for %ds, the API server's minimum); %d tokens issued, %d rotations",
		lifetime, 600, c.Kubelet.TokensIssued(ns, pod), c.Kubelet.TokensIssued(ns, pod)-1)
}

// workerImage is the image make image writes, built once per test binary
// and unpacked as a runtime would; the kubelet of the test cluster runs it
// as ghcr.io/limenhq/limen:e2e.
var workerImage = struct {
	once sync.Once
	ref  string
	err  error
}{}

// chartWorker makes the fake kubelet run the image, stops e's host worker
// (a pod replaces it), and renders the chart's worker for e into ns with a
// fresh join token, persistence off, and values on top. Apply it with
// applyChart.
func chartWorker(t *testing.T, ctx context.Context, e *gatewaytest.Env, ns string, values ...string) string {
	t.Helper()
	c := clustertest.Cluster(t)
	const repo, tag = "ghcr.io/limenhq/limen", "e2e"
	workerImage.once.Do(func() {
		dir, err := os.MkdirTemp("", "limen-e2e-image-")
		if err != nil {
			workerImage.err = err
			return
		}
		start := time.Now()
		if workerImage.err = oci.Build(repoDir(t), filepath.Join(dir, "oci"), repo+":"+tag, "e2e"); workerImage.err != nil {
			return
		}
		img, err := oci.Unpack(filepath.Join(dir, "oci"), filepath.Join(dir, "rootfs"))
		if err != nil {
			workerImage.err = err
			return
		}
		t.Logf("image built and unpacked in %s; layer %d bytes", time.Since(start).Round(time.Second), img.Manifest.Layers[0].Size)
		c.Kubelet.SetImage(repo+":"+tag, []string{filepath.Join(img.Root, img.Config.Config.Entrypoint[0])})
		workerImage.ref = repo + ":" + tag
	})
	if workerImage.err != nil {
		t.Fatalf("build the image: %v", workerImage.err)
	}
	e.StopWorker() // the host process: the pod replaces it
	if err := e.WaitWorker(ctx, false); err != nil {
		t.Fatal(err)
	}
	manifest, _ := helmTemplate(t, ns, false, append([]string{"--set", "proxy.enabled=false",
		"--set", "image.repository=" + repo, "--set", "image.tag=" + tag,
		"--set", "worker.cluster=" + gatewaytest.ClusterName, "--set", "worker.proxyAddress=" + e.ProxyAddr,
		"--set", "worker.joinToken.value=" + joinToken(t, ctx, e), "--set", "worker.clusterLabels.env=dev",
		"--set", "worker.rbac.impersonation=" + string(e.RBAC()), "--set", "worker.persistence.enabled=false",
		"--set", "worker.networkPolicy.apiServer.cidrs={127.0.0.1/32}",
		"--set", "worker.networkPolicy.proxy.to[0].ipBlock.cidr=127.0.0.1/32"}, values...)...)
	return manifest
}

// joinToken is a new single-use join token for e's cluster.
func joinToken(t *testing.T, ctx context.Context, e *gatewaytest.Env) string {
	t.Helper()
	token, err := e.Limen(ctx, "admin", "", "tokens", "create", "--cluster", gatewaytest.ClusterName, "--ttl", "10m")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(token)
}

// applyChart applies a render into ns, and deletes it when the test ends.
func applyChart(t *testing.T, ns, manifest string) {
	t.Helper()
	if out, errb, err := adminKubectl(t, manifest, "apply", "-n", ns, "-f", "-"); err != nil {
		t.Fatalf("kubectl apply the chart: %v\n%s%s", err, out, errb)
	}
	t.Cleanup(func() {
		_, _, _ = adminKubectl(t, manifest, "delete", "--ignore-not-found", "--wait=false", "-n", ns, "-f", "-")
	})
}

// waitWorkerPod waits until the chart's worker Deployment runs exactly one
// pod, and returns its name. A pod that never started does not count: the
// test node's authorizer can refuse a new pod's ConfigMap for a moment, and
// the ReplicaSet then replaces that pod.
func waitWorkerPod(t *testing.T, ctx context.Context, ns string) string {
	t.Helper()
	c := clustertest.Cluster(t)
	for {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=worker"})
		var running []string
		if err == nil {
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && podStarted(p) {
					running = append(running, p.Name)
				}
			}
		}
		if len(running) == 1 {
			return running[0]
		}
		if ctx.Err() != nil {
			t.Fatalf("the worker pod never ran in %s: %v %+v", ns, err, pods)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// podStarted reports whether p's containers have started.
func podStarted(p corev1.Pod) bool {
	for _, st := range p.Status.ContainerStatuses {
		if st.State.Running == nil {
			return false
		}
	}
	return len(p.Status.ContainerStatuses) > 0
}

// revokeServiceAccount deletes and recreates the ServiceAccount: every token
// issued for the old one stops authenticating at once (the token names the
// account's UID), so only a token the kubelet requests afterwards works.
func revokeServiceAccount(t *testing.T, ctx context.Context, ns, name string) {
	t.Helper()
	sas := clustertest.Cluster(t).Client.CoreV1().ServiceAccounts(ns)
	old, err := sas.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sas.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: old.Labels}}, metav1.CreateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsAlreadyExists(err) || ctx.Err() != nil {
			t.Fatalf("recreate ServiceAccount %s/%s: %v", ns, name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// podLog is the worker container's output, for failure messages.
func podLog(c *controlplane.Cluster, ns, pod string) string {
	b, err := c.Client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	return string(b)
}
