package proxy

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

// The principal the proxy lends its own access review is good for that
// review's one request and nothing else: not another path, not another
// method, not a review context without a target. A second guard behind
// reviewTarget (issue #30, item 2).
func TestReviewPrincipalOnlyForItsRequest(t *testing.T) {
	k := &Kube{Authenticate: func(*http.Request) (identity.Principal, time.Time, error) {
		return identity.Principal{}, time.Time{}, errors.New("no client certificate")
	}}
	bob := identity.Principal{Kind: identity.KindUser, Name: "bob", ClientID: identity.ClientKubectl}
	target, err := reviewTarget("demo")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method, uri, lent string
		ok                      bool
	}{
		{"the review", http.MethodPost, target, target, true},
		{"another path", http.MethodPost, "/k8s/demo/api/v1/namespaces/default/configmaps", target, false},
		{"the review's path with a query", http.MethodPost, target + "?x=1", target, false},
		{"another method", http.MethodGet, target, target, false},
		{"no target lent", http.MethodPost, target, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.WithValue(context.Background(), reviewKey{}, reviewAs{p: bob, expires: time.Now().Add(time.Minute), target: tc.lent})
			r, _ := http.NewRequestWithContext(ctx, tc.method, tc.uri, nil)
			r.RequestURI = tc.uri
			p, _, err := k.authenticate(r)
			if tc.ok != (err == nil) || tc.ok && p.Name != "bob" {
				t.Fatalf("authenticate: %+v, %v; want ok=%v", p, err, tc.ok)
			}
		})
	}
}
