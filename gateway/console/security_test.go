package console_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/access"
	"github.com/limenhq/limen/gateway/identity"
)

// The "what may I do" page asks about a cluster by name only: a value that
// is not a DNS label (a path, a query, upper case) is refused with 400 and
// never reaches the computation (issue #30, item 2; the proxy refuses it
// too, gateway/proxy TestAccessRefusesAClusterThatIsAPath).
func TestAccessPageRefusesABadCluster(t *testing.T) {
	asked := 0
	stand := func(_ context.Context, p identity.Principal, _ time.Time, cluster, ns string) (access.Report, error) {
		asked++
		return access.Report{Cluster: cluster, Namespace: ns, Client: p.ClientID}, nil
	}
	e := newEnvWith(t, stand)
	c := e.client(t)
	signIn(t, c, e, "bob", "bob-password-1")
	for _, cluster := range []string{"demo/api/v1/namespaces/default/configmaps?x=", "demo/api", "demo?x=", "Demo", "-demo", "..",
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"} {
		st, _, _ := page(t, c, e, "/console/access?"+url.Values{"cluster": {cluster}, "namespace": {"default"}}.Encode())
		if st != http.StatusBadRequest {
			t.Errorf("cluster %q: %d, want 400", cluster, st)
		}
	}
	if asked != 0 {
		t.Errorf("the computation was asked %d times about a bad cluster name", asked)
	}
	if st, _, _ := page(t, c, e, "/console/access?cluster=demo"); st != http.StatusOK || asked != 1 {
		t.Errorf("cluster demo: %d, asked %d times; want 200, asked once", st, asked)
	}
}
