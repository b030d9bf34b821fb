package e2e

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestChartHighAvailability renders the proxy as three replicas on one
// PostgreSQL (ci/proxy-ha.yaml; docs/HA.md), once with the database URL
// and password from a Secret of the operator's and once from a Secret the
// chart makes, and proves what several proxies need: the replica count, a
// PodDisruptionBudget of one, a rolling update that starts the new pod
// first, the URL from the Secret and never in the ConfigMap, the password
// as a file, the shared keys mounted as --ca-dir, each pod's IP as its
// --peer-address (downward API), readiness on /readyz, and the pods
// spread over nodes. Each render passes the API server's server-side dry
// run under the restricted Pod Security profile with no warning. A render
// with the defaults stays one SQLite proxy.
func TestChartHighAvailability(t *testing.T) {
	set := filepath.Join(chartDir(t), "ci", "proxy-ha.yaml")
	const chartURL = "postgres://limen@db.example:5432/limen?sslmode=verify-full"
	for _, v := range []struct {
		name           string
		args           []string
		secret, urlKey string
		made           bool // the chart makes the database Secret
	}{
		{"existing secret", []string{"-f", set}, "limen-database", "url", false},
		{"chart-made secret", []string{"-f", set, "--set", "proxy.database.existingSecret=", "--set", "proxy.database.passwordKey=",
			"--set", "proxy.database.url=" + chartURL, "--set", "proxy.database.password=not-a-real-password"}, "limen-proxy-database", "url", true},
	} {
		t.Run(strings.ReplaceAll(v.name, " ", "-"), func(t *testing.T) {
			ns := restrictedNamespace(t)
			manifest, _ := helmTemplate(t, ns, false, v.args...)
			objs := byKind(t, manifest)

			dep := one(t, objs, "Deployment")
			spec := dep["spec"].(map[string]any)
			if spec["replicas"] != float64(3) && spec["replicas"] != int64(3) {
				t.Errorf("Deployment replicas %v (%T), want 3", spec["replicas"], spec["replicas"])
			}
			strategy := fmt.Sprint(spec["strategy"])
			if !strings.Contains(strategy, "RollingUpdate") || !strings.Contains(strategy, "maxUnavailable:0") {
				t.Errorf("strategy %s, want a RollingUpdate with maxUnavailable 0 (the new proxy ready before an old one ends)", strategy)
			}
			pod := spec["template"].(map[string]any)["spec"].(map[string]any)
			c := pod["containers"].([]any)[0].(map[string]any)
			env := map[string]string{}
			for _, e := range c["env"].([]any) {
				e := e.(map[string]any)
				if vf, ok := e["valueFrom"]; ok {
					env[e["name"].(string)] = fmt.Sprint(vf)
				} else {
					env[e["name"].(string)] = fmt.Sprint(e["value"])
				}
			}
			if want := fmt.Sprintf("map[secretKeyRef:map[key:%s name:%s]]", v.urlKey, v.secret); env["LIMEN_DATABASE_URL"] != want {
				t.Errorf("LIMEN_DATABASE_URL %q, want %q", env["LIMEN_DATABASE_URL"], want)
			}
			if env["POD_IP"] != "map[fieldRef:map[fieldPath:status.podIP]]" || env["LIMEN_PEER_ADDRESS"] != "$(POD_IP):8443" {
				t.Errorf("POD_IP %q, LIMEN_PEER_ADDRESS %q: want the pod IP from the downward API and $(POD_IP):8443", env["POD_IP"], env["LIMEN_PEER_ADDRESS"])
			}
			if env["LIMEN_DATABASE_PASSWORD_FILE"] != "/etc/limen/database/password" {
				t.Errorf("LIMEN_DATABASE_PASSWORD_FILE %q, want the mounted password file", env["LIMEN_DATABASE_PASSWORD_FILE"])
			}
			if p := fmt.Sprint(c["readinessProbe"]); !strings.Contains(p, "path:/readyz") {
				t.Errorf("readinessProbe %s, want /readyz", p)
			}
			if l := fmt.Sprint(c["lifecycle"]); l != "map[preStop:map[sleep:map[seconds:5]]]" || fmt.Sprint(pod["terminationGracePeriodSeconds"]) != "35" {
				t.Errorf("lifecycle %s, terminationGracePeriodSeconds %v: want a 5 s preStop sleep (out of the Service before the port closes) and 25+5+5 s of grace",
					l, pod["terminationGracePeriodSeconds"])
			}
			mounts := fmt.Sprint(c["volumeMounts"])
			vols := fmt.Sprint(pod["volumes"])
			for _, want := range []string{"mountPath:/etc/limen/ca name:keys readOnly:true", "mountPath:/etc/limen/database name:database readOnly:true"} {
				if !strings.Contains(mounts, want) {
					t.Errorf("volumeMounts %s, want %s", mounts, want)
				}
			}
			for _, want := range []string{"name:keys secret:map[defaultMode:288 secretName:limen-ca]",
				fmt.Sprintf("items:[map[key:password path:password]] secretName:%s", v.secret), "name:data"} {
				if !strings.Contains(vols, want) {
					t.Errorf("volumes %s, want %s", vols, want)
				}
			}
			if strings.Contains(vols, "persistentVolumeClaim") || len(objs["PersistentVolumeClaim"]) != 0 {
				t.Errorf("several proxies must not share one claim: %s", vols)
			}
			aff := fmt.Sprint(pod["affinity"])
			if !strings.Contains(aff, "preferredDuringSchedulingIgnoredDuringExecution") || !strings.Contains(aff, "topologyKey:kubernetes.io/hostname") ||
				!strings.Contains(aff, "app.kubernetes.io/component:proxy") {
				t.Errorf("affinity %s, want the proxies spread over nodes (preferred anti-affinity on the proxy's labels)", aff)
			}

			pdb := one(t, objs, "PodDisruptionBudget")
			ps := pdb["spec"].(map[string]any)
			if fmt.Sprint(ps["maxUnavailable"]) != "1" || !reflect.DeepEqual(ps["selector"], spec["selector"]) {
				t.Errorf("PodDisruptionBudget %v, want maxUnavailable 1 over the Deployment's pods %v", ps, spec["selector"])
			}

			cm := fmt.Sprint(one(t, objs, "ConfigMap")["data"])
			if !strings.Contains(cm, "ca-dir: /etc/limen/ca") || strings.Contains(cm, "postgres") || strings.Contains(cm, "password") {
				t.Errorf("the proxy's config %s: want ca-dir and neither the database URL nor its password", cm)
			}
			secrets := objs["Secret"]
			if v.made {
				if len(secrets) != 1 || fmt.Sprint(secrets[0]["stringData"]) != "map[password:not-a-real-password url:"+chartURL+"]" {
					t.Errorf("the chart's database Secret: %v, want url and password", secrets)
				}
				if ann := fmt.Sprint(spec["template"].(map[string]any)["metadata"].(map[string]any)["annotations"]); !strings.Contains(ann, "checksum/database") {
					t.Errorf("pod annotations %s, want checksum/database (a new URL rolls the proxies)", ann)
				}
			} else if len(secrets) != 0 {
				t.Errorf("the chart made Secrets %v though the operator's are named", secrets)
			}

			out, errb, err := adminKubectl(t, manifest, "apply", "--dry-run=server", "-n", ns, "-f", "-")
			if err != nil {
				t.Fatalf("kubectl apply --dry-run=server: %v\n%s%s", err, out, errb)
			}
			if strings.Contains(errb, "Warning") {
				t.Fatalf("the API server warned about the render:\n%s", errb)
			}
			if n, kinds := strings.Count(out, "(server dry run)"), renderedKinds(t, manifest); n != len(kinds) {
				t.Fatalf("the API server validated %d objects of the %d rendered (%v):\n%s", n, len(kinds), kinds, out)
			}
			t.Logf("%s: %s", v.name, strings.TrimSpace(out))
		})
	}

	// The defaults: one proxy on its SQLite volume, replaced, not rolled,
	// with no database, no peer address and no anti-affinity.
	manifest, _ := helmTemplate(t, "limen", false, "--set", "worker.enabled=false")
	dep := one(t, byKind(t, manifest), "Deployment")
	spec := fmt.Sprint(dep["spec"])
	for _, want := range []string{"replicas:1", "type:Recreate", "persistentVolumeClaim"} {
		if !strings.Contains(spec, want) {
			t.Errorf("the default proxy Deployment lacks %s: %s", want, spec)
		}
	}
	for _, not := range []string{"LIMEN_DATABASE_URL", "LIMEN_PEER_ADDRESS", "podAntiAffinity", "preStop"} {
		if strings.Contains(spec, not) {
			t.Errorf("the default proxy Deployment has %s: %s", not, spec)
		}
	}
}

// byKind groups a render's objects by kind.
func byKind(t *testing.T, manifest string) map[string][]map[string]any {
	t.Helper()
	out := map[string][]map[string]any{}
	for _, o := range decodeAll(t, manifest) {
		k := fmt.Sprint(o["kind"])
		out[k] = append(out[k], o)
	}
	return out
}

// one is the only object of a kind.
func one(t *testing.T, objs map[string][]map[string]any, kind string) map[string]any {
	t.Helper()
	if len(objs[kind]) != 1 {
		t.Fatalf("%d objects of kind %s rendered, want 1", len(objs[kind]), kind)
	}
	return objs[kind][0]
}
