package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limenhq/limen/gateway/impersonate"
	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/cluster/controlplane"
	"github.com/limenhq/limen/test/gatewaytest"
	"github.com/limenhq/limen/test/otlpsink"
)

// TestOneTraceFromProxyToAPIServer: with tracing on, one kubectl request
// through Limen is one trace across three processes — the proxy's request
// span, the worker's span as its child, and the real kube-apiserver's spans
// as children of the worker's call upstream — all received by one OTLP
// collector.
//
// The API server continues a caller's trace only for the groups
// system:masters and system:monitoring (it treats any other caller as a
// public endpoint: a trace of its own, linked). So this worker
// authenticates as a user in system:monitoring, with the impersonation
// rights of deploy/kube's worker; a ServiceAccount cannot be in that group.
func TestOneTraceFromProxyToAPIServer(t *testing.T) {
	sink := clustertest.Traces(t)
	c := clustertest.Cluster(t)
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "limen-e2e-traced-worker"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "limen-worker-impersonate"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: controlplane.MonitoringUser}},
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(context.Background(), binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	otlp := []string{"--otlp-endpoint", "http://" + sink.Addr, "--trace-sample-ratio", "1"}
	e := extraGateway(t, "tracing on", gatewaytest.Options{RBAC: impersonate.ModeLegacy, ProxyArgs: otlp,
		WorkerArgs: append(otlp, "--kube-token-file", c.MonitoringTokenFile)})
	kc := login(t, e, "alice")
	ns := clustertest.Namespace(t)
	name := fmt.Sprintf("traced-%d", time.Now().UnixNano())
	if out, errOut, code := kubectl(t, kc, "", "-n", ns, "create", "configmap", name, "--from-literal=k=v"); code != 0 {
		t.Fatalf("kubectl create: %s %s", out, errOut)
	}

	// The worker's span for this request names the configmap's namespace;
	// from it, find its trace.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var trace []otlpsink.Span
	spans, ok := sink.Wait(ctx, func(all []otlpsink.Span) bool {
		trace = nil
		for _, s := range all {
			if s.Service == "limen-worker" && s.Name == "limen.worker.request" && s.Attributes["k8s.namespace"] == ns &&
				s.Attributes["k8s.verb"] == "create" {
				for _, o := range all {
					if o.TraceID == s.TraceID {
						trace = append(trace, o)
					}
				}
			}
		}
		return hasService(trace, "limen-proxy") && hasService(trace, "apiserver") && hasService(trace, "limen-worker")
	})
	if !ok {
		t.Fatalf("no trace with spans of the proxy, the worker and the API server; the trace found:\n%s\nall %d spans received:\n%s",
			describe(trace), len(spans), describe(spans))
	}
	t.Logf("the trace:\n%s", describe(trace))
	byID := map[string]otlpsink.Span{}
	for _, s := range trace {
		byID[s.SpanID] = s
	}
	parentService := func(s otlpsink.Span) string { return byID[s.ParentSpanID].Service }
	for _, s := range trace {
		switch {
		case s.Service == "limen-worker" && s.Name == "limen.worker.request":
			if parentService(s) != "limen-proxy" {
				t.Errorf("the worker's request span's parent is %q, want a span of the proxy:\n%s", parentService(s), describe(trace))
			}
		case s.Service == "apiserver" && s.ParentSpanID != "" && byID[s.ParentSpanID].Service != "apiserver":
			if p := byID[s.ParentSpanID]; p.Service != "limen-worker" || p.Name != "limen.worker.upstream" {
				t.Errorf("the API server's span %q has parent %s/%s, want the worker's upstream span", s.Name, p.Service, p.Name)
			}
		}
	}
	roots := 0
	for _, s := range trace {
		if _, ok := byID[s.ParentSpanID]; !ok {
			roots++
			if s.Service != "limen-proxy" {
				t.Errorf("the trace's root is %s/%s, want the proxy's span", s.Service, s.Name)
			}
		}
	}
	if roots != 1 {
		t.Errorf("the trace has %d roots, want 1:\n%s", roots, describe(trace))
	}
	// No user data beyond the audit fields: no query string, no body.
	for _, s := range trace {
		if s.Service == "apiserver" {
			continue
		}
		for k, v := range s.Attributes {
			if strings.Contains(v, "k=v") || strings.Contains(k, "query") || strings.Contains(k, "body") {
				t.Errorf("span %s/%s carries %s=%q", s.Service, s.Name, k, v)
			}
		}
	}
}

func hasService(spans []otlpsink.Span, service string) bool {
	for _, s := range spans {
		if s.Service == service {
			return true
		}
	}
	return false
}

func describe(spans []otlpsink.Span) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s %s/%s span=%s parent=%s %v\n", s.TraceID, s.Service, s.Name, s.SpanID, s.ParentSpanID, s.Attributes)
	}
	return b.String()
}
