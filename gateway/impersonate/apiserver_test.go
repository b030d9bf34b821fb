package impersonate

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/filters/impersonation"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/limenhq/limen/gateway/identity"
)

// grants is a stand-in for the cluster's RBAC (the authorizer is the one
// part of the API server this test does not run): it allows the worker the
// impersonation verbs of one Mode, on anything, and nothing else.
type grants Mode

func (g grants) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	v := a.GetVerb()
	switch {
	case Mode(g) == ModeLegacy && v == "impersonate",
		Mode(g) == ModeConstrained && (v == "impersonate:user-info" || strings.HasPrefix(v, "impersonate-on:user-info:")):
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// apiServer is the API server's own impersonation filter (the one
// kube-apiserver runs when ConstrainedImpersonation is on, which also
// serves legacy impersonation) in front of a handler that answers with the
// user the request ended up as. Headers travel over a real connection, so
// net/http's parsing and canonicalization of the header names apply.
func apiServer(t *testing.T, g grants) string {
	t.Helper()
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, metav1.SchemeGroupVersion)
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, _ := request.UserFrom(r.Context())
		_ = json.NewEncoder(w).Encode(map[string]any{"name": u.GetName(), "groups": u.GetGroups(), "extra": u.GetExtra()})
	})
	h := impersonation.WithConstrainedImpersonation(echo, g, serializer.NewCodecFactory(s))
	worker := &user.DefaultInfo{Name: "system:serviceaccount:limen-system:limen-worker"}
	h = filters.WithRequestInfo(h, &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")})
	authn := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(request.WithUser(r.Context(), worker)))
	})
	srv := httptest.NewServer(authn)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestSessionExtraAsTheAPIServerReadsIt: the headers Config.Set writes are
// read by the API server's own impersonation code as the mapped user, the
// groups and the session under SessionExtra; and the legacy key cannot be
// impersonated under constrained impersonation at all, which is why the
// constrained Mode sends another.
func TestSessionExtraAsTheAPIServerReadsIt(t *testing.T) {
	ci := identity.Principal{Kind: identity.KindBot, Name: "ci"}
	tests := []struct {
		name    string
		cluster grants
		c       Config
		p       identity.Principal
		code    int
		user    string
		extra   string
		refusal string
	}{
		{"legacy", grants(ModeLegacy), Config{Mode: ModeLegacy}, alice, 200, "alice", "limen-session", ""},
		{"constrained", grants(ModeConstrained), Config{Mode: ModeConstrained, UserPrefix: "limen:"}, alice, 200, "limen:alice", "limenhq.github.io/session", ""},
		{"constrained bot", grants(ModeConstrained), Config{Mode: ModeConstrained}, ci, 200, "bot:ci", "limenhq.github.io/session", ""},
		{"legacy headers, constrained cluster", grants(ModeConstrained), Config{Mode: ModeLegacy}, alice, 403, "", "", "must be a domain-prefixed path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := apiServer(t, tt.cluster)
			req, _ := http.NewRequest(http.MethodGet, url+"/api/v1/namespaces/default/pods", nil)
			if err := tt.c.Set(req.Header, tt.p, []string{"limen:view"}, "0123abcd"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.code {
				t.Fatalf("%d %s, want %d", resp.StatusCode, body, tt.code)
			}
			if tt.code != 200 {
				if !strings.Contains(string(body), tt.refusal) {
					t.Fatalf("refusal %s, want one saying %q", body, tt.refusal)
				}
				return
			}
			var got struct {
				Name   string              `json:"name"`
				Groups []string            `json:"groups"`
				Extra  map[string][]string `json:"extra"`
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if got.Name != tt.user || !slices.Contains(got.Groups, "limen:view") || len(got.Extra) != 1 ||
				!slices.Equal(got.Extra[tt.extra], []string{"0123abcd"}) || tt.c.SessionExtra() != tt.extra {
				t.Fatalf("the API server sees %+v, want user %s in limen:view with only %s = 0123abcd", got, tt.user, tt.extra)
			}
		})
	}
}
