package e2e

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/limenhq/limen/gateway/impersonate"
	"github.com/limenhq/limen/test/gatewaytest"
)

// sessionExtra is the user-extra key e's worker sends the session id under:
// limen-session, or limenhq.github.io/session under constrained
// impersonation.
func sessionExtra(e *gatewaytest.Env) string {
	return impersonate.Config{Mode: e.RBAC()}.SessionExtra()
}

type userInfo struct {
	Username string              `json:"username"`
	Groups   []string            `json:"groups"`
	Extra    map[string][]string `json:"extra"`
}

func whoami(t *testing.T, kubeconfig string, args ...string) userInfo {
	t.Helper()
	out, stderr, code := kubectl(t, kubeconfig, "", append([]string{"auth", "whoami", "-o", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("kubectl auth whoami: exit %d: %s", code, stderr)
	}
	var review struct {
		Status struct {
			UserInfo userInfo `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &review); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	return review.Status.UserInfo
}

func TestWhoamiShowsUserGroupsAndSession(t *testing.T) {
	kc := userKubeconfig(t, "alice")
	u := whoami(t, kc)
	if u.Username != "alice" {
		t.Errorf("username %q, want alice", u.Username)
	}
	for _, g := range []string{"limen:edit", "limen:view"} {
		if !slices.Contains(u.Groups, g) {
			t.Errorf("groups %v lack %s", u.Groups, g)
		}
	}
	key := sessionExtra(gateway(t))
	if s := u.Extra[key]; len(s) != 1 || len(s[0]) != 32 || len(u.Extra) != 1 {
		t.Errorf("extra %v, want only %s with one session id", u.Extra, key)
	}
}

func TestAsFlagsAreIgnored(t *testing.T) {
	kc := userKubeconfig(t, "bob")
	u := whoami(t, kc, "--as=admin", "--as-group=system:masters")
	if u.Username != "bob" || slices.Contains(u.Groups, "system:masters") {
		t.Fatalf("impersonation flags reached the cluster: %+v", u)
	}
	if !slices.Contains(u.Groups, "limen:view") || slices.Contains(u.Groups, "limen:edit") {
		t.Fatalf("bob's groups %v, want limen:view only", u.Groups)
	}
}
