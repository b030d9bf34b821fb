package storetest

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/requests"
	"github.com/limenhq/limen/gateway/store"
)

// The example policy (bundles/example/data.json): bob (view-demo) may
// request edit-demo on demo for up to 1h with a reason; edit-dev and admin
// holders (alice, dana) approve.
var (
	reqBob   = identity.Principal{Kind: identity.KindUser, Name: "bob", ClientID: identity.ClientKubectl}
	reqAlice = identity.Principal{Kind: identity.KindUser, Name: "alice", ClientID: identity.ClientKubectl, Traits: map[string][]string{"groups": {"dev"}}}
	reqDana  = identity.Principal{Kind: identity.KindUser, Name: "dana", ClientID: identity.ClientKubectl, Traits: map[string][]string{"groups": {"admins"}}}
	reqCarol = identity.Principal{Kind: identity.KindUser, Name: "carol", ClientID: identity.ClientKubectl}
)

func openRequests(t *testing.T, b store.Backend, rec *recorder, now *time.Time) *requests.Service {
	t.Helper()
	engine, err := policy.New(ctx, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &requests.Service{Store: must[store.Requests](t)(b.Requests(ctx)), Policy: engine, Audit: rec,
		Clusters: func(name string) policy.Cluster { return policy.Cluster{Name: name} },
		Now:      func() time.Time { return *now }}
}

func testRequests(t *testing.T, b store.Backend) {
	rec := &recorder{}
	now := t0
	s := openRequests(t, b, rec, &now)
	ask := requests.Ask{Role: "edit-demo", Cluster: "demo", Duration: 30 * time.Minute, Reason: "INC-123"}
	r, err := s.Create(ctx, reqBob, ask)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != requests.StatePending || r.Needed != 1 {
		t.Fatalf("created %+v, want pending needing 1 approval", r)
	}
	if got, err := s.Get(ctx, r.ID); err != nil || got.Reason != "INC-123" || !got.Requester.Same(reqBob) {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if err := s.Check(ctx, reqBob, r.Elevation()); !errors.Is(err, requests.ErrRefused) {
		t.Fatalf("Check of a pending request = %v, want refused", err)
	}
	if got, _ := s.List(ctx, reqAlice, requests.Filter{}); len(got) != 1 {
		t.Fatalf("alice lists %d requests, want bob's one to decide", len(got))
	}
	if got, _ := s.List(ctx, reqCarol, requests.Filter{}); len(got) != 0 {
		t.Fatalf("carol lists %d requests, want none", len(got))
	}

	now = now.Add(time.Minute)
	a, err := s.Approve(ctx, reqAlice, r.ID, "ok for INC-123")
	if err != nil {
		t.Fatal(err)
	}
	if a.State != requests.StateApproved || !a.Expires.Equal(now.Add(30*time.Minute).Truncate(time.Second)) {
		t.Fatalf("approved %+v, want approved until %s", a, now.Add(30*time.Minute))
	}
	if err := s.Check(ctx, reqBob, a.Elevation()); err != nil {
		t.Fatalf("Check of the approved request: %v", err)
	}
	if err := s.Check(ctx, reqCarol, a.Elevation()); !errors.Is(err, requests.ErrRefused) {
		t.Fatalf("Check of bob's request by carol = %v, want refused", err)
	}
	els, known, err := s.Credential(ctx, reqBob, []string{r.ID, "req-unknown"})
	if err != nil || len(els) != 1 || els[0].Role != "edit-demo" || len(known) != 1 {
		t.Fatalf("Credential = %v, %v, %v", els, known, err)
	}
	if els, _, _ := s.Credential(ctx, reqCarol, []string{r.ID}); len(els) != 0 {
		t.Fatalf("carol's credential carries bob's request: %v", els)
	}
	if _, err := s.Deny(ctx, reqDana, r.ID, "too late"); !errors.Is(err, requests.ErrConflict) {
		t.Fatalf("Deny after approval = %v, want conflict", err)
	}

	// Expiry ends it, audited, once.
	if n, err := s.Expire(ctx); err != nil || n != 0 {
		t.Fatalf("Expire before the end = %d, %v", n, err)
	}
	now = a.Expires
	if n, err := s.Expire(ctx); err != nil || n != 1 {
		t.Fatalf("Expire at the end = %d, %v; want 1", n, err)
	}
	if n, _ := s.Expire(ctx); n != 0 {
		t.Fatalf("second Expire = %d, want 0", n)
	}
	if err := s.Check(ctx, reqBob, a.Elevation()); !errors.Is(err, requests.ErrRefused) {
		t.Fatalf("Check of the expired request = %v, want refused", err)
	}
	// A lock ends a request for good (EndFor), audited.
	r2, err := s.Create(ctx, reqBob, ask)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Approve(ctx, reqAlice, r2.ID, ""); err != nil {
		t.Fatal(err)
	}
	if n, err := s.EndFor(ctx, reqBob, "locked: incident"); err != nil || n != 1 {
		t.Fatalf("EndFor(bob) = %d, %v; want 1", n, err)
	}
	if got, _ := s.Get(ctx, r2.ID); got.State != requests.StateExpired {
		t.Fatalf("after EndFor the request is %s, want expired", got.State)
	}
	for typ, want := range map[audit.Type]int{audit.TypeAccessRequest: 2, audit.TypeAccessApprove: 2, audit.TypeAccessExpire: 2} {
		if got := rec.count(typ); got != want {
			t.Errorf("%d %s events, want %d", got, typ, want)
		}
	}
}

// The refusals are refused and audited, and change nothing.
func testRequestRefusals(t *testing.T, b store.Backend) {
	rec := &recorder{}
	now := t0
	s := openRequests(t, b, rec, &now)
	r, err := s.Create(ctx, reqBob, requests.Ask{Role: "edit-demo", Cluster: "demo", Duration: time.Hour, Reason: "INC-1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		do   func() error
		want error
	}{
		{"self-approval", func() error { _, err := s.Approve(ctx, reqBob, r.ID, ""); return err }, requests.ErrRefused},
		{"non-approver", func() error { _, err := s.Approve(ctx, reqCarol, r.ID, ""); return err }, requests.ErrRefused},
		{"non-approver denies", func() error { _, err := s.Deny(ctx, reqCarol, r.ID, ""); return err }, requests.ErrRefused},
		{"too long", func() error {
			_, err := s.Create(ctx, reqBob, requests.Ask{Role: "edit-demo", Cluster: "demo", Duration: time.Hour + time.Second, Reason: "x"})
			return err
		}, requests.ErrRefused},
		{"no reason", func() error {
			_, err := s.Create(ctx, reqBob, requests.Ask{Role: "edit-demo", Cluster: "demo", Duration: time.Minute})
			return err
		}, requests.ErrRefused},
		{"not requestable", func() error {
			_, err := s.Create(ctx, reqBob, requests.Ask{Role: "admin", Cluster: "demo", Duration: time.Minute, Reason: "x"})
			return err
		}, requests.ErrRefused},
		{"other cluster", func() error {
			_, err := s.Create(ctx, reqBob, requests.Ask{Role: "edit-demo", Cluster: "prod", Duration: time.Minute, Reason: "x"})
			return err
		}, requests.ErrRefused},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := rec.count(audit.TypeAuthDenied)
			if err := tt.do(); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if rec.count(audit.TypeAuthDenied) != before+1 {
				t.Fatal("the refusal was not audited")
			}
		})
	}
	if got, _ := s.Get(ctx, r.ID); got.State != requests.StatePending || len(got.Approvals) != 0 {
		t.Fatalf("after the refusals the request is %+v, want pending and unapproved", got)
	}
	// A decision the audit trail cannot take is not taken.
	rec.fail = true
	if _, err := s.Approve(ctx, reqAlice, r.ID, ""); !errors.Is(err, requests.ErrUnavailable) {
		t.Fatalf("Approve with the audit trail down = %v, want unavailable", err)
	}
	rec.fail = false
	if got, _ := s.Get(ctx, r.ID); got.State != requests.StatePending {
		t.Fatalf("an unaudited approval was stored: %+v", got)
	}
	// A lapsed request cannot be approved.
	now = now.Add(requests.DefaultPendingTTL)
	if _, err := s.Approve(ctx, reqAlice, r.ID, ""); !errors.Is(err, requests.ErrConflict) {
		t.Fatalf("Approve of a lapsed request = %v, want conflict", err)
	}
}

// Two approvers at once: the store's Update lets exactly one approve.
func testRequestApprovedOnce(t *testing.T, b store.Backend) {
	rec := &recorder{}
	now := t0
	s := openRequests(t, b, rec, &now)
	r, err := s.Create(ctx, reqBob, requests.Ask{Role: "edit-demo", Cluster: "demo", Duration: time.Hour, Reason: "INC-2"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			who := reqAlice
			if i%2 == 1 {
				who = reqDana
			}
			_, errs[i] = s.Approve(ctx, who, r.ID, "")
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, requests.ErrConflict):
			t.Errorf("approve: %v", err)
		}
	}
	if ok != 1 || rec.count(audit.TypeAccessApprove) != 1 {
		t.Fatalf("%d approvals succeeded, %d audited; want exactly 1", ok, rec.count(audit.TypeAccessApprove))
	}
}

// Update keeps any other Update of the same request out until it ends: no
// decision is lost to a concurrent one (the driver's row lock).
func testRequestUpdateSerialized(t *testing.T, b store.Backend) {
	db := must[store.Requests](t)(b.Requests(ctx))
	if err := db.Insert(ctx, store.RequestRecord{ID: "req-count", Requester: "user:bob", State: "pending", Created: 1, Expires: 2, Data: "0"}); err != nil {
		t.Fatal(err)
	}
	if err := db.Insert(ctx, store.RequestRecord{ID: "req-count", Requester: "user:bob", State: "pending", Created: 1, Expires: 2, Data: "0"}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second Insert of one id = %v, want ErrExists", err)
	}
	const n = 8
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			err := db.Update(ctx, "req-count", func(r *store.RequestRecord) error {
				v, err := strconv.Atoi(r.Data)
				if err != nil {
					return err
				}
				time.Sleep(5 * time.Millisecond) // let the others try meanwhile
				r.Data = strconv.Itoa(v + 1)
				return nil
			})
			if err != nil {
				t.Errorf("Update: %v", err)
			}
		})
	}
	wg.Wait()
	if r, err := db.Get(ctx, "req-count"); err != nil || r.Data != strconv.Itoa(n) {
		t.Fatalf("after %d concurrent Updates the count is %q (%v), want %d: updates were lost", n, r.Data, err, n)
	}
	if err := db.Update(ctx, "req-none", func(*store.RequestRecord) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Update of an unknown id = %v, want ErrNotFound", err)
	}
}
