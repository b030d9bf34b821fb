package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limenhq/limen/test/gatewaytest"
)

// tokenRefresh is how long the worker may keep using the token it read
// (gateway/worker.TokenFile re-reads the file about once a minute), plus
// slack for a loaded machine.
const tokenRefresh = 70 * time.Second

// TestServiceAccountToken rotates the worker's ServiceAccount token under
// load as the kubelet does (a new token written over the file) and revokes
// the old one (deleting the Secret it is bound to); then makes the file
// unreadable (gone), which must be 503 naming the token, never 403; then
// restores it: service returns by itself.
func TestServiceAccountToken(t *testing.T) {
	needFull(t)
	env := startGateway(t, &setup{})
	ctx := context.Background()
	kc, err := env.Login(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	// A token bound to a Secret of its own can be revoked by deleting it;
	// the worker reads it when it starts.
	old := boundToken(t, env, "faults-token-old")
	writeToken(t, env.TokenFile, old.token)
	if err := env.RestartWorker(ctx); err != nil {
		t.Fatal(err)
	}
	l := startLoad(t, env, kc)
	time.Sleep(5 * time.Second)

	rotated := time.Now()
	next := boundToken(t, env, "faults-token-new")
	writeToken(t, env.TokenFile, next.token)
	old.revoke(t)
	// The API server's 401 for the revoked token makes the worker read the
	// file again: the rotated token serves at once.
	back := l.recovered(t, time.Now(), 10*time.Second)
	// The API server caches a token's authentication for seconds: the
	// revocation bites within them.
	time.Sleep(15 * time.Second)
	served, refused := l.served(rotated, time.Now())
	l.mu.Lock()
	for _, g := range l.gets {
		if !g.served && !g.at.Before(rotated) && (g.code != 503 || !strings.Contains(g.msg, "ServiceAccount token")) {
			t.Errorf("after the rotation a GET got %d %q, want 503 naming the worker's token", g.code, g.msg)
			break
		}
	}
	l.mu.Unlock()
	if refused > 5 {
		t.Errorf("%d GETs refused after the rotation: the worker must take the rotated token at the first 401", refused)
	}
	saw := fmt.Sprintf("rotated and the old token revoked: %d GETs served, %d refused (%v), in the next 15 s; first served after the revocation %s",
		served, refused, l.refusals(rotated), back.Round(time.Millisecond))

	gone := time.Now()
	if err := os.Remove(env.TokenFile); err != nil {
		t.Fatal(err)
	}
	took := l.refusedWithin(t, gone, tokenRefresh, "ServiceAccount token")
	l.mu.Lock()
	for _, g := range l.gets {
		if !g.served && !g.at.Before(gone) && g.code != 503 {
			t.Errorf("token file gone: a GET got %d %q, want 503 (an operator problem, not a refusal of the user)", g.code, g.msg)
			break
		}
	}
	l.mu.Unlock()
	time.Sleep(3 * time.Second)
	saw += fmt.Sprintf("; token file gone: the first 503 naming the token %s after, then %v", took.Round(time.Millisecond), l.refusals(gone))

	restored := time.Now()
	writeToken(t, env.TokenFile, next.token)
	back = l.recovered(t, restored, 10*time.Second)
	time.Sleep(6 * time.Second)
	v := checkInvariants(t, l, invariantsOpts{user: "alice", proxyDir: env.ProxyDataDir()})
	report(t, figures{scenario: "serviceaccount-token", saw: saw, recovered: back, v: v,
		extra: "the worker re-reads the token file every minute, at once while it is unreadable, and at once after the API server refused the token it holds (gateway/worker/token.go)"})
}

// token is a ServiceAccount token of the worker bound to a Secret.
type token struct {
	env    *gatewaytest.Env
	secret string
	token  string
}

func boundToken(t *testing.T, env *gatewaytest.Env, secret string) token {
	t.Helper()
	ctx := context.Background()
	core := env.Cluster.Client.CoreV1()
	_ = core.Secrets("limen-system").Delete(ctx, secret, metav1.DeleteOptions{}) // an earlier run's
	s, err := core.Secrets("limen-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = core.Secrets("limen-system").Delete(context.Background(), secret, metav1.DeleteOptions{}) })
	exp := int64(3600)
	tr, err := core.ServiceAccounts("limen-system").CreateToken(ctx, env.ServiceAccount(), &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &exp,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: secret, UID: s.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest bound to Secret %s: %v", secret, err)
	}
	return token{env: env, secret: secret, token: tr.Status.Token}
}

// revoke deletes the token's Secret: the API server refuses the token from
// then on.
func (k token) revoke(t *testing.T) {
	t.Helper()
	if err := k.env.Cluster.Client.CoreV1().Secrets("limen-system").Delete(context.Background(), k.secret, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// writeToken replaces the token file at once, as the kubelet's atomic
// writer does.
func writeToken(t *testing.T, path, tok string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".token-new")
	if err := os.WriteFile(tmp, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
