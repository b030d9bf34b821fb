package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/requests"
	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
)

// accessFor is how long bob's request lasts once approved: long enough for
// the steps that need it, short enough for the test to wait it out.
const accessFor = 20 * time.Second

// TestAccessRequest is just-in-time access end to end with the real
// kubectl: bob (view on demo) is refused a delete, requests edit-demo,
// cannot approve it himself nor have carol (no approver) do so, alice
// approves it, bob deletes, and when the request expires his open watch of
// secrets (which only edit may read) ends and the delete is refused again.
// Every step is in the audit trail.
func TestAccessRequest(t *testing.T) {
	e := gateway(t)
	ctx := context.Background()
	c := clustertest.Cluster(t)
	ns := clustertest.Namespace(t)
	t0 := time.Now()
	for _, name := range []string{"doomed", "doomed-later"} {
		if _, err := c.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bob := userKubeconfig(t, "bob")
	userKubeconfig(t, "alice") // logged in, to approve
	limen := func(user string, args ...string) (string, error) { return e.Limen(ctx, user, "", args...) }

	if _, stderr, code := kubectl(t, bob, "", "-n", ns, "delete", "configmap", "doomed"); code == 0 || !strings.Contains(stderr, "forbidden") {
		t.Fatalf("bob's delete before any request: exit %d, %s; want forbidden", code, stderr)
	}

	// Refusals: too long, not requestable, no reason.
	for _, args := range [][]string{
		{"request", "edit-demo", "--cluster", "demo", "--for", "2h", "--reason", "INC-123"},
		{"request", "admin", "--cluster", "demo", "--for", "1m", "--reason", "INC-123"},
		{"request", "edit-demo", "--cluster", "demo", "--for", "1m"},
	} {
		if out, err := limen("bob", args...); err == nil || !strings.Contains(err.Error(), "403") {
			t.Fatalf("limen %v = %q, %v; want refused (403)", args, out, err)
		}
	}

	out, err := limen("bob", "request", "edit-demo", "--cluster", "demo", "--for", accessFor.String(), "--reason", "INC-123: clean up")
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(out)
	if !strings.HasPrefix(id, "req-") {
		t.Fatalf("limen request printed %q, want a request id", out)
	}
	// Pending: the plugin asks, the proxy lends nothing yet.
	if _, stderr, code := kubectl(t, bob, "", "-n", ns, "delete", "configmap", "doomed"); code == 0 {
		t.Fatalf("bob deleted while the request was pending: %s", stderr)
	}
	if _, err := limen("bob", "requests", "approve", id); err == nil || !strings.Contains(err.Error(), "your own request") {
		t.Fatalf("bob approving his own request: %v; want refused", err)
	}
	carolLogin(t, e)
	if _, err := limen("carol", "requests", "approve", id); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("carol (no approver) approving: %v; want refused", err)
	}
	if ls, err := limen("alice", "requests", "ls"); err != nil || !strings.Contains(ls, id) {
		t.Fatalf("alice's requests ls = %q, %v; want %s listed", ls, err, id)
	}
	if _, err := limen("alice", "requests", "approve", id, "--reason", "ok for INC-123"); err != nil {
		t.Fatal(err)
	}
	expires := requestExpiry(t, e, "alice", id)
	if _, stderr, code := kubectl(t, bob, "", "-n", ns, "delete", "configmap", "doomed"); code != 0 {
		t.Fatalf("bob's delete after approval: exit %d, %s", code, stderr)
	}
	// A watch only edit may make: it lasts while the request does.
	_, done := openStream(t, bob, "-n", ns, "get", "secrets", "-w")
	waitOpen(t, "watch", 1)
	var ended time.Time
	select {
	case <-done:
		ended = time.Now()
	case <-time.After(time.Until(expires) + 10*time.Second):
		t.Fatalf("bob's watch of secrets outlived his request (expired %s) by 10s", expires.Format(time.RFC3339Nano))
	}
	// Not before the expiry (the request's own time, stored at approval),
	// and not a second after it but for the watchdog's tick.
	if early := expires.Sub(ended); early > 100*time.Millisecond {
		t.Fatalf("the watch ended %s before the request expired", early)
	}
	if late := ended.Sub(expires); late > 1500*time.Millisecond {
		t.Fatalf("the watch ended %s after the request expired; want within a second", late)
	}
	t.Logf("the watch ended %s after the request expired", ended.Sub(expires))
	if _, stderr, code := kubectl(t, bob, "", "-n", ns, "delete", "configmap", "doomed-later"); code == 0 || !strings.Contains(stderr, "forbidden") {
		t.Fatalf("bob's delete after expiry: exit %d, %s; want forbidden", code, stderr)
	}

	// The audit trail: every step with who and why.
	pollUntil(t, 5*time.Second, func() bool {
		return len(storedSince(t, audit.Query{Type: audit.TypeAccessExpire, Since: t0})) > 0
	}, "access.expire stored")
	find := func(typ audit.Type, user string) audit.Event {
		t.Helper()
		for _, ev := range storedSince(t, audit.Query{Type: typ, User: user, Since: t0}) {
			if ev.Fields["request"] == id {
				return ev
			}
		}
		t.Fatalf("no %s of %s for %s in the audit trail", typ, user, id)
		return audit.Event{}
	}
	if ev := find(audit.TypeAccessRequest, "bob"); ev.Fields["reason"] != "INC-123: clean up" || ev.Fields["role"] != "edit-demo" {
		t.Errorf("access.request = %+v", ev.Fields)
	}
	if ev := find(audit.TypeAccessApprove, "alice"); ev.Fields["reason"] != "ok for INC-123" || ev.Fields["requester"] != "user:bob" {
		t.Errorf("access.approve = %+v", ev.Fields)
	}
	if ev := find(audit.TypeAccessUse, "bob"); ev.Cluster != "demo" {
		t.Errorf("access.use = %+v", ev)
	}
	find(audit.TypeAccessExpire, "bob")
	refusals := map[string]bool{}
	for _, ev := range storedSince(t, audit.Query{Type: audit.TypeAuthDenied, Action: audit.ActionAccess, Since: t0}) {
		switch {
		case strings.Contains(ev.Denied.Reason, "at most 1h"):
			refusals["too long"] = true
		case strings.Contains(ev.Denied.Reason, `request role "admin"`):
			refusals["not requestable"] = true
		case strings.Contains(ev.Denied.Reason, "needs a reason"):
			refusals["no reason"] = true
		case strings.Contains(ev.Denied.Reason, "your own request"):
			refusals["self-approval"] = true
		case ev.Principal.Name == "carol":
			refusals["non-approver"] = true
		}
	}
	for _, want := range []string{"too long", "not requestable", "no reason", "self-approval", "non-approver"} {
		if !refusals[want] {
			t.Errorf("refusal %q not audited (have %v)", want, refusals)
		}
	}
}

// carolLogin adds carol, a local user no role binds, and logs her in.
func carolLogin(t *testing.T, e *gatewaytest.Env) {
	t.Helper()
	ctx := context.Background()
	const pw = "carol-password-1"
	if _, err := e.Limen(ctx, "", pw+"\n", "users", "add", "carol", "--local", "--data-dir", e.ProxyDataDir(), "--password-stdin"); err != nil &&
		!strings.Contains(err.Error(), "exists") {
		t.Fatal(err)
	}
	if _, err := e.Limen(ctx, "carol", pw+"\n", "login", "--proxy", e.ProxyAddr, "--user", "carol", "--password-stdin", "--ca-fingerprint", e.Fingerprint); err != nil {
		t.Fatal(err)
	}
}

// pollUntil polls cond until it holds or d passes.
func pollUntil(t *testing.T, d time.Duration, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("not within %s: %s", d, what)
}

// TestAccessRequestConsole: alice approves bob's request on the console's
// Requests page in a real browser; bob's kubectl then has edit; a lock ends
// the request for good (after the unlock bob is back to view).
func TestAccessRequestConsole(t *testing.T) {
	e := gateway(t)
	ctx := context.Background()
	ns := clustertest.Namespace(t)
	t0 := time.Now()
	bob := userKubeconfig(t, "bob")
	out, err := e.Limen(ctx, "bob", "", "request", "edit-demo", "--cluster", "demo", "--for", "5m", "--reason", "INC-7: console")
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(out)

	// What bob may request is in limen kube access; kube login --all
	// writes a context for the cluster.
	if acc, err := e.Limen(ctx, "bob", "", "kube", "access", "demo", "-n", ns); err != nil || !strings.Contains(acc, "limen request edit-demo --cluster demo --for 1h") {
		t.Errorf("limen kube access demo = %q, %v; want the edit-demo request named", acc, err)
	}
	all, err := e.Limen(ctx, "bob", "", "kube", "login", "--all")
	if err != nil {
		t.Fatal(err)
	}
	allKC := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(all), "export KUBECONFIG="))
	if _, stderr, code := kubectl(t, allKC, "", "--context", "limen-demo", "-n", ns, "get", "configmaps"); code != 0 {
		t.Fatalf("kubectl --context limen-demo with the --all kubeconfig: exit %d, %s", code, stderr)
	}

	base := "https://" + e.ProxyAddr
	b := consoleBrowser(t)
	signIn(t, b, base, "alice", password("alice"))
	row := fmt.Sprintf(`tr[data-request=%q]`, id)
	waitFor(t, b, base+"/console/requests", fmt.Sprintf(`!!document.querySelector('%s[data-state=pending]')`, row), 10*time.Second)
	if got := text(t, b, row); !strings.Contains(got, "user:bob") || !strings.Contains(got, "INC-7: console") || !strings.Contains(got, "edit-demo") {
		t.Fatalf("the request's row says %q", got)
	}
	screenshot(t, b, "requests")
	run(t, b, "approve on the console",
		chromedp.SendKeys("#reason-"+id, "ok from the console", css("#reason-"+id)),
		chromedp.Click(fmt.Sprintf(`button[aria-label="Approve %s"]`, id), css(fmt.Sprintf(`button[aria-label="Approve %s"]`, id))))
	waitJS(t, b, "approved", fmt.Sprintf(`!!document.querySelector('%s[data-state=approved]')`, row))
	if got := text(t, b, "p.done"); !strings.Contains(got, "approved") {
		t.Fatalf("after Approve the page says %q", got)
	}

	if _, stderr, code := kubectl(t, bob, "", "-n", ns, "create", "configmap", "made-by-bob"); code != 0 {
		t.Fatalf("bob's create after the console approval: exit %d, %s", code, stderr)
	}
	found := false
	for _, ev := range storedSince(t, audit.Query{Type: audit.TypeAccessApprove, User: "alice", Since: t0}) {
		found = found || (ev.Fields["request"] == id && ev.Fields["reason"] == "ok from the console" && ev.Principal.ClientID == "console")
	}
	if !found {
		t.Error("the console approval is not audited as alice's, through the console, with her reason")
	}

	// A lock ends it for good.
	admin(t, "lock", "bob", "--reason", "INC-7 over")
	unlocked := false
	defer func() {
		if !unlocked {
			_, _ = e.Limen(ctx, "admin", "", "unlock", "bob")
		}
	}()
	if _, _, code := kubectl(t, bob, "", "-n", ns, "get", "configmaps"); code == 0 {
		t.Fatal("locked bob could list configmaps")
	}
	admin(t, "unlock", "bob")
	unlocked = true
	if _, stderr, code := kubectl(t, bob, "", "-n", ns, "delete", "configmap", "made-by-bob"); code == 0 || !strings.Contains(stderr, "forbidden") {
		t.Fatalf("bob's delete after lock and unlock: exit %d, %s; want forbidden (the lock ended the request)", code, stderr)
	}
	ended := false
	for _, ev := range storedSince(t, audit.Query{Type: audit.TypeAccessExpire, User: "bob", Since: t0}) {
		ended = ended || (ev.Fields["request"] == id && strings.Contains(ev.Fields["reason"], "locked"))
	}
	if !ended {
		t.Error("the lock's end of the request is not audited")
	}
}

// requestExpiry is when request id's access ends, as user lists it.
func requestExpiry(t *testing.T, e *gatewaytest.Env, user, id string) time.Time {
	t.Helper()
	out, err := e.Limen(context.Background(), user, "", "requests", "ls", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var list []requests.Request
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("limen requests ls -o json: %v\n%s", err, out)
	}
	for _, r := range list {
		if r.ID == id {
			return r.Expires
		}
	}
	t.Fatalf("%s does not list %s", user, id)
	return time.Time{}
}
