// Package storetest is the conformance suite of gateway/store, after Go
// CDK's drivertest: every engine must pass it. It runs through the domain
// packages (users, bots, enroll, locks, audit), the portable API, so that
// what it checks is what callers rely on, whatever the engine.
//
// An engine's test calls Run with a function that opens a new, empty
// Backend; the suite opens one per test and closes it at the end.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/bots"
	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/store"
	"github.com/limenhq/limen/gateway/users"
)

// Opener returns a new, empty Backend of the engine under test.
type Opener func(t *testing.T) store.Backend

// Run runs the conformance suite against the engine open returns.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(*testing.T, store.Backend)
	}{
		{"Users", testUsers},
		{"Bots", testBots},
		{"Tokens", testTokens},
		{"TokenRedeemedOnce", testTokenRedeemedOnce},
		{"TokenAuditFailsClosed", testTokenAuditFailsClosed},
		{"Locks", testLocks},
		{"AuditSearch", testAuditSearch},
		{"AuditOutcomeUnknown", testAuditOutcomeUnknown},
		{"AuditSessionEvents", testAuditSessionEvents},
		{"AuditGroupCommit", testAuditGroupCommit},
		{"AuditCursor", testAuditCursor},
		{"AuditReadOnly", testAuditReadOnly},
		{"SignIns", testSignIns},
		{"PolicyFloor", testPolicyFloor},
		{"Sessions", testSessions},
		{"Requests", testRequests},
		{"RequestRefusals", testRequestRefusals},
		{"RequestApprovedOnce", testRequestApprovedOnce},
		{"RequestUpdateSerialized", testRequestUpdateSerialized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := open(t)
			t.Cleanup(func() {
				if err := b.Close(); err != nil {
					t.Errorf("close backend: %v", err)
				}
			})
			tt.fn(t, b)
		})
	}
}

// fp is a CA fingerprint as join tokens carry it.
var fp = "sha256:" + strings.Repeat("ab", 32)

var (
	ctx   = context.Background()
	t0    = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	admin = identity.Principal{Kind: identity.KindUser, Name: "root"}
)

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func testUsers(t *testing.T, b store.Backend) {
	db := must[store.Users](t)(b.Users(ctx))
	s, err := users.New(db, users.Options{Cost: bcrypt.MinCost, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	traits := map[string][]string{"team": {"web", "ops"}}
	if err := s.Add(ctx, "alice", "correct horse", traits); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(ctx, "alice", "another password", nil); !errors.Is(err, users.ErrExists) {
		t.Fatalf("second add: %v, want ErrExists", err)
	}
	if err := s.Add(ctx, "bob", "bob's password", nil); err != nil {
		t.Fatal(err)
	}
	u, err := s.Get(ctx, "alice")
	if err != nil || u.Name != "alice" || len(u.Traits["team"]) != 2 || !u.Created.Equal(t0) {
		t.Fatalf("get: %+v %v", u, err)
	}
	if _, err := s.Get(ctx, "carol"); !errors.Is(err, users.ErrNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "alice" || list[1].Name != "bob" {
		t.Fatalf("list: %+v %v", list, err)
	}
	if _, err := s.Authenticate(ctx, "alice", "correct horse", "192.0.2.1"); err != nil {
		t.Fatalf("right password: %v", err)
	}
	if _, err := s.Authenticate(ctx, "alice", "wrong horse", "192.0.2.1"); !errors.Is(err, users.ErrBadCredentials) {
		t.Fatalf("wrong password: %v", err)
	}
	if err := s.SetPassword(ctx, "alice", "a new password"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, "alice", "a new password", "192.0.2.2"); err != nil {
		t.Fatalf("new password: %v", err)
	}
	if err := s.SetPassword(ctx, "carol", "whatever pw"); !errors.Is(err, users.ErrNotFound) {
		t.Fatalf("set password of unknown: %v", err)
	}
	if err := s.Remove(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "alice"); !errors.Is(err, users.ErrNotFound) {
		t.Fatalf("second remove: %v", err)
	}
	if _, err := s.Authenticate(ctx, "alice", "a new password", "192.0.2.3"); !errors.Is(err, users.ErrBadCredentials) {
		t.Fatalf("removed user: %v", err)
	}
}

func testBots(t *testing.T, b store.Backend) {
	now := t0
	s := bots.New(must[store.Bots](t)(b.Bots(ctx)), func() time.Time { return now })
	if err := s.Add(ctx, "ci", map[string][]string{"repo": {"web"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(ctx, "ci", nil); !errors.Is(err, bots.ErrExists) {
		t.Fatalf("second add: %v", err)
	}
	if _, _, err := s.CreateSecret(ctx, "nobody", time.Hour, 1, admin); !errors.Is(err, bots.ErrNotFound) {
		t.Fatalf("secret for an unknown bot: %v", err)
	}
	secret, info, err := s.CreateSecret(ctx, "ci", time.Hour, 2, admin)
	if err != nil || info.UsesLeft != 2 {
		t.Fatalf("create secret: %+v %v", info, err)
	}
	if _, _, err := s.Redeem(ctx, "other", secret); !errors.Is(err, bots.ErrBadSecret) {
		t.Fatalf("another bot's name: %v", err)
	}
	bot, got, err := s.Redeem(ctx, "ci", secret)
	if err != nil || bot.Traits["repo"][0] != "web" || got.UsesLeft != 1 {
		t.Fatalf("first use: %+v %+v %v", bot, got, err)
	}
	if _, got, err = s.Redeem(ctx, "ci", secret); err != nil || got.UsesLeft != 0 {
		t.Fatalf("second use: %+v %v", got, err)
	}
	if _, _, err := s.Redeem(ctx, "ci", secret); !errors.Is(err, bots.ErrBadSecret) {
		t.Fatalf("third use of a two-use secret: %v", err)
	}
	unlimited, _, err := s.CreateSecret(ctx, "ci", time.Hour, 0, admin)
	if err != nil {
		t.Fatal(err)
	}
	// Concurrent logins with an unlimited secret all succeed.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { _, _, err := s.Redeem(ctx, "ci", unlimited); errs <- err })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent use of an unlimited secret: %v", err)
		}
	}
	now = now.Add(2 * time.Hour)
	if _, _, err := s.Redeem(ctx, "ci", unlimited); !errors.Is(err, bots.ErrBadSecret) {
		t.Fatalf("expired secret: %v", err)
	}
	now = t0
	if err := s.Remove(ctx, "ci"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Redeem(ctx, "ci", unlimited); !errors.Is(err, bots.ErrBadSecret) {
		t.Fatalf("secret of a removed bot: %v", err)
	}
	if err := s.Add(ctx, "ci", nil); err != nil {
		t.Fatal(err)
	}
	// The secrets went with the bot: a new bot of the same name gets none.
	if _, _, err := s.Redeem(ctx, "ci", unlimited); !errors.Is(err, bots.ErrBadSecret) {
		t.Fatalf("secret of a removed bot, name reused: %v", err)
	}
	if list, err := s.List(ctx); err != nil || len(list) != 1 {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := s.Remove(ctx, "nobody"); !errors.Is(err, bots.ErrNotFound) {
		t.Fatalf("remove unknown: %v", err)
	}
}

// recorder is an audit sink that can be made to fail.
type recorder struct {
	mu     sync.Mutex
	events []audit.Event
	fail   bool
}

func (r *recorder) Emit(_ context.Context, e audit.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return audit.ErrUnavailable
	}
	r.events = append(r.events, e)
	return nil
}

func (r *recorder) count(typ audit.Type) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func openTokens(t *testing.T, b store.Backend, rec *recorder, now *time.Time) *enroll.TokenStore {
	s, err := enroll.NewTokenStore(must[store.Tokens](t)(b.Tokens(ctx)),
		enroll.TokenStoreOptions{Audit: rec, Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testTokens(t *testing.T, b store.Backend) {
	rec, now := &recorder{}, t0
	s := openTokens(t, b, rec, &now)
	tok, info, err := s.Create(ctx, "prod", time.Hour, fp, admin)
	if err != nil || info.Cluster != "prod" {
		t.Fatalf("create: %+v %v", info, err)
	}
	if err := s.Redeem(ctx, tok, "dev", "192.0.2.9:1"); !errors.Is(err, enroll.ErrTokenCluster) {
		t.Fatalf("other cluster: %v", err)
	}
	if err := s.Redeem(ctx, tok, "prod", "192.0.2.9:1"); err != nil {
		t.Fatalf("redeem (the other cluster's attempt must leave it unused): %v", err)
	}
	if err := s.Redeem(ctx, tok, "prod", "192.0.2.9:1"); !errors.Is(err, enroll.ErrTokenUsed) {
		t.Fatalf("second redeem: %v", err)
	}
	late, _, err := s.Create(ctx, "prod", time.Minute, fp, admin)
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	if err := s.Redeem(ctx, late, "prod", "192.0.2.9:1"); !errors.Is(err, enroll.ErrTokenExpired) {
		t.Fatalf("expired: %v", err)
	}
	unknown, _ := enroll.NewToken(fp)
	if err := s.Redeem(ctx, unknown, "prod", "192.0.2.9:1"); !errors.Is(err, enroll.ErrTokenUnknown) {
		t.Fatalf("unknown: %v", err)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %+v %v", list, err)
	}
	var used int
	for _, ti := range list {
		if ti.Used != nil {
			used++
			if !ti.Used.Equal(t0) {
				t.Errorf("used at %s, want %s", ti.Used, t0)
			}
		}
	}
	if used != 1 || rec.count(audit.TypeTokenCreate) != 2 || rec.count(audit.TypeTokenUse) != 1 {
		t.Fatalf("%d used, %d token.create, %d token.use; want 1, 2, 1", used, rec.count(audit.TypeTokenCreate), rec.count(audit.TypeTokenUse))
	}
}

func testTokenRedeemedOnce(t *testing.T, b store.Backend) {
	rec, now := &recorder{}, t0
	s := openTokens(t, b, rec, &now)
	tok, _, err := s.Create(ctx, "prod", time.Hour, fp, admin)
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() { errs <- s.Redeem(ctx, tok, "prod", "192.0.2.9:1") })
	}
	wg.Wait()
	close(errs)
	ok := 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, enroll.ErrTokenUsed):
			t.Errorf("concurrent redeem: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d of %d concurrent redemptions succeeded, want exactly 1", ok, n)
	}
}

func testTokenAuditFailsClosed(t *testing.T, b store.Backend) {
	rec, now := &recorder{fail: true}, t0
	s := openTokens(t, b, rec, &now)
	if _, _, err := s.Create(ctx, "prod", time.Hour, fp, admin); !errors.Is(err, enroll.ErrAuditUnavailable) {
		t.Fatalf("create with the audit trail down: %v", err)
	}
	if list, err := s.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("a token whose creation was not audited is stored: %+v %v", list, err)
	}
	rec.fail = false
	tok, _, err := s.Create(ctx, "prod", time.Hour, fp, admin)
	if err != nil {
		t.Fatal(err)
	}
	rec.fail = true
	if err := s.Redeem(ctx, tok, "prod", "192.0.2.9:1"); !errors.Is(err, enroll.ErrAuditUnavailable) {
		t.Fatalf("redeem with the audit trail down: %v", err)
	}
	rec.fail = false
	if err := s.Redeem(ctx, tok, "prod", "192.0.2.9:1"); err != nil {
		t.Fatalf("a redemption that was not audited used the token up: %v", err)
	}
}

func testLocks(t *testing.T, b store.Backend) {
	s := locks.New(must[store.Locks](t)(b.Locks(ctx)))
	now := time.Now().UTC()
	lock := func(kind identity.Kind, name, reason string, expires time.Time) locks.Lock {
		return locks.Lock{Target: locks.Target{Kind: kind, Name: name}, Reason: reason, Expires: expires,
			CreatedBy: admin.String(), CreatedAt: now.Add(-time.Minute)}
	}
	for _, l := range []locks.Lock{
		lock(identity.KindUser, "mallory", "incident 7", time.Time{}),
		lock(identity.KindBot, "ci", "leaked secret", now.Add(time.Hour)),
		lock(identity.KindUser, "alice", "left", now.Add(-time.Second)), // expired
		lock(identity.KindUser, "mallory", "incident 8", time.Time{}),   // replaces the first
	} {
		if err := s.Add(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Add(ctx, lock(identity.KindUser, "", "no name", time.Time{})); err == nil {
		t.Fatal("an invalid lock was stored")
	}
	got, err := s.List(ctx, now)
	if err != nil || len(got) != 2 {
		t.Fatalf("list: %+v %v, want the bot's and mallory's", got, err)
	}
	if got[0].Target.Kind != identity.KindBot || got[1].Target.Name != "mallory" || got[1].Reason != "incident 8" ||
		!got[0].Expires.Equal(now.Add(time.Hour)) || !got[1].Expires.IsZero() || !got[1].CreatedAt.Equal(now.Add(-time.Minute)) {
		t.Fatalf("list: %+v", got)
	}
	if _, err := s.Remove(ctx, locks.Target{Kind: identity.KindUser, Name: "alice"}, now); !errors.Is(err, locks.ErrNotFound) {
		t.Fatalf("remove the pruned lock: %v", err)
	}
	removed, err := s.Remove(ctx, locks.Target{Kind: identity.KindUser, Name: "mallory"}, now)
	if err != nil || removed.Reason != "incident 8" {
		t.Fatalf("remove: %+v %v", removed, err)
	}
	if _, err := s.Remove(ctx, removed.Target, now); !errors.Is(err, locks.ErrNotFound) {
		t.Fatalf("second remove: %v", err)
	}
}

func openAudit(t *testing.T, b store.Backend, opts audit.Options) *audit.Store {
	s, err := audit.New(ctx, must[store.Audit](t)(b.Audit(ctx, opts.ReadOnly)), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func kubeEvent(user, cluster, verb string, at time.Time) audit.Event {
	return audit.Event{
		Type: audit.TypeKubeRequest, Time: at, Principal: identity.Principal{Kind: identity.KindUser, Name: user},
		Groups: []string{"limen:view"}, Cluster: cluster, SessionID: fmt.Sprintf("%032x", at.UnixNano()),
		ClientAddr: "192.0.2.1:5555",
		Kube: &audit.KubeRequest{Verb: verb, APIVersion: "v1", Resource: "pods", Namespace: "default", Name: "web",
			Method: "GET", Path: "/api/v1/namespaces/default/pods/web", Status: 200, Latency: 3 * time.Millisecond},
	}
}

func emit(t *testing.T, s *audit.Store, events ...audit.Event) {
	t.Helper()
	for _, e := range events {
		if err := s.Emit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
}

func testAuditSearch(t *testing.T, b store.Backend) {
	s := openAudit(t, b, audit.Options{})
	bot := identity.Principal{Kind: identity.KindBot, Name: "bob"}
	events := []audit.Event{
		kubeEvent("alice", "prod", "get", t0),
		kubeEvent("alice", "prod", "list", t0.Add(time.Minute)),
		kubeEvent("bob", "prod", "get", t0.Add(2*time.Minute)),
		kubeEvent("alice", "dev", "get", t0.Add(3*time.Minute)),
		{Type: audit.TypeAuthDenied, Time: t0.Add(4 * time.Minute), Cluster: "prod",
			Denied: &audit.Denied{Hop: audit.HopWorker, Action: audit.ActionKube, Reason: "grant expired"}},
		{Type: audit.TypeAuthDenied, Time: t0.Add(5 * time.Minute), Principal: admin,
			Denied: &audit.Denied{Hop: audit.HopProxy, Action: audit.ActionAdmin, Reason: "locked"}},
		// An admin event whose fields happen to say "action": no refusal.
		{Type: audit.TypeUserLock, Time: t0.Add(6 * time.Minute), Principal: admin, Fields: map[string]string{"action": audit.ActionAdmin}},
		{Type: audit.TypeAuthLogin, Time: t0.Add(7 * time.Minute), Principal: bot},
	}
	emit(t, s, events...)
	tests := []struct {
		name string
		q    audit.Query
		want []int // indexes into events, oldest first
	}{
		{"all", audit.Query{}, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{"user by name", audit.Query{User: "bob"}, []int{2, 7}},
		{"user by kind:name", audit.Query{User: "bot:bob"}, []int{7}},
		{"cluster", audit.Query{Cluster: "prod"}, []int{0, 1, 2, 4}},
		{"verb and cluster", audit.Query{Verb: "get", Cluster: "prod"}, []int{0, 2}},
		{"since", audit.Query{Since: t0.Add(2 * time.Minute)}, []int{2, 3, 4, 5, 6, 7}},
		{"type", audit.Query{Type: audit.TypeAuthDenied}, []int{4, 5}},
		{"action kube", audit.Query{Action: audit.ActionKube}, []int{4}},
		{"action admin", audit.Query{Action: audit.ActionAdmin}, []int{5}},
		{"action and user", audit.Query{Action: audit.ActionAdmin, User: "alice"}, nil},
		{"limit keeps newest", audit.Query{Limit: 2}, []int{6, 7}},
		{"no match", audit.Query{User: "carol"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Search(ctx, tt.q)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("%d events, want %d: %+v", len(got), len(tt.want), got)
			}
			for i, idx := range tt.want {
				w := events[idx]
				if got[i].ID == 0 || got[i].Type != w.Type || !got[i].Time.Equal(w.Time) || got[i].Principal.String() != w.Principal.String() {
					t.Errorf("event %d = %+v, want %+v", i, got[i], w)
				}
			}
		})
	}
}

func testAuditOutcomeUnknown(t *testing.T, b store.Backend) {
	s := openAudit(t, b, audit.Options{})
	sent := func(i int, method, verb string) audit.Event {
		e := kubeEvent("alice", "prod", verb, t0.Add(time.Duration(i)*time.Second))
		e.Type, e.SessionID = audit.TypeKubeSent, fmt.Sprintf("%032x", i+1)
		e.Kube.Method, e.Kube.Status, e.Kube.Latency = method, 0, 0
		return e
	}
	answered, lostRead, lostWrite, refused := sent(0, "GET", "list"), sent(1, "GET", "get"), sent(2, "DELETE", "delete"), sent(3, "POST", "create")
	emit(t, s, answered, lostRead, lostWrite, refused)
	outcome := answered
	outcome.Type, outcome.Time = audit.TypeKubeRequest, answered.Time.Add(time.Millisecond)
	refusal := audit.Event{Type: audit.TypeAuthDenied, Time: refused.Time.Add(time.Millisecond), Principal: refused.Principal,
		Cluster: "prod", SessionID: refused.SessionID, Denied: &audit.Denied{Hop: audit.HopWorker, Action: audit.ActionKube, Reason: "grant expired"}}
	emit(t, s, outcome, refusal)

	got, err := s.Search(ctx, audit.Query{})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, e := range got {
		seen = append(seen, fmt.Sprintf("%s %s %v %v", e.Type, e.SessionID[30:], e.OutcomeUnknown, e.PossiblyApplied))
	}
	want := []string{"kube.request 01 false false", "kube.sent 02 true false", "kube.sent 03 true true", "auth.denied 04 false false"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("search: %v, want %v", seen, want)
	}
	unknown, err := s.Search(ctx, audit.Query{OutcomeUnknown: true})
	if err != nil || len(unknown) != 2 || !unknown[1].PossiblyApplied {
		t.Fatalf("outcome unknown: %+v %v", unknown, err)
	}
	all, err := s.Search(ctx, audit.Query{Type: audit.TypeKubeSent})
	if err != nil || len(all) != 4 {
		t.Fatalf("every kube.sent: %d %v, want 4", len(all), err)
	}
}

func testAuditSessionEvents(t *testing.T, b store.Backend) {
	s := openAudit(t, b, audit.Options{})
	id := "0123456789abcdef0123456789abcdef"
	start := audit.Event{Type: audit.TypeSessionStart, Time: t0, Principal: admin, Cluster: "prod", SessionID: id,
		Session: &audit.Session{Kind: "kube", Login: "exec"}}
	end := start
	end.Type, end.Time = audit.TypeSessionEnd, t0.Add(time.Minute)
	emit(t, s, start)
	if _, ok, err := s.SessionEnd(ctx, id); ok || err != nil {
		t.Fatalf("session.end before it is stored: %v %v", ok, err)
	}
	emit(t, s, end)
	got, ok, err := s.SessionStart(ctx, id)
	if err != nil || !ok || !got.Time.Equal(t0) || got.Session.Login != "exec" {
		t.Fatalf("session.start: %+v %v %v", got, ok, err)
	}
	if got, ok, err = s.SessionEnd(ctx, id); err != nil || !ok || !got.Time.Equal(t0.Add(time.Minute)) {
		t.Fatalf("session.end: %+v %v %v", got, ok, err)
	}
	if _, ok, err := s.SessionStart(ctx, ""); ok || err != nil {
		t.Fatalf("no session id: %v %v", ok, err)
	}
}

// testAuditGroupCommit: concurrent callers share commits, each is answered
// only once its event is stored, and the overlap (Submit, then Append of
// the outcome) keeps the order.
func testAuditGroupCommit(t *testing.T, b store.Backend) {
	s := openAudit(t, b, audit.Options{})
	const n = 100
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			e := kubeEvent(fmt.Sprintf("u%d", i), "prod", "get", t0.Add(time.Duration(i)))
			e.Type = audit.TypeKubeSent
			c := s.Submit(e)
			err := c.Wait(ctx)
			if err == nil {
				o := e
				o.Type = audit.TypeKubeRequest
				s.Append(o)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	u, err := s.Usage(ctx)
	if err != nil || u.Events != 2*n || u.Used <= 0 {
		t.Fatalf("usage %+v %v, want %d events", u, err, 2*n)
	}
	if unknown, err := s.Search(ctx, audit.Query{OutcomeUnknown: true}); err != nil || len(unknown) != 0 {
		t.Fatalf("outcome unknown: %d %v, want none", len(unknown), err)
	}
}

func testAuditCursor(t *testing.T, b store.Backend) {
	s := openAudit(t, b, audit.Options{})
	if sp, err := s.Span(ctx); err != nil || sp != (audit.Span{}) {
		t.Fatalf("span of an empty trail: %+v %v", sp, err)
	}
	for i := range 10 {
		emit(t, s, kubeEvent("alice", "prod", "get", t0.Add(time.Duration(i)*time.Minute)))
	}
	sp, err := s.Span(ctx)
	if err != nil || sp.Last-sp.First != 9 || !sp.Oldest.Equal(t0) {
		t.Fatalf("span: %+v %v", sp, err)
	}
	first, err := s.EventsAfter(ctx, 0, 4)
	if err != nil || len(first) != 4 || first[0].ID != sp.First || !first[3].Time.Equal(t0.Add(3*time.Minute)) {
		t.Fatalf("first page: %+v %v", first, err)
	}
	rest, err := s.EventsAfter(ctx, first[3].ID, 100)
	if err != nil || len(rest) != 6 || rest[5].ID != sp.Last {
		t.Fatalf("second page: %d %v", len(rest), err)
	}
	// Retention never passes the cursor: only what is older and exported.
	n, err := s.DeleteBefore(ctx, t0.Add(5*time.Minute), first[2].ID, 100)
	if err != nil || n != 3 {
		t.Fatalf("delete before the cursor: %d %v, want 3", n, err)
	}
	n, err = s.DeleteBefore(ctx, t0.Add(5*time.Minute), math.MaxInt64, 1)
	if err != nil || n != 1 {
		t.Fatalf("delete with a limit: %d %v, want 1", n, err)
	}
	if sp, err = s.Span(ctx); err != nil || sp.First != first[3].ID+1 || !sp.Oldest.Equal(t0.Add(4*time.Minute)) {
		t.Fatalf("span after deleting: %+v %v", sp, err)
	}
}

func testAuditReadOnly(t *testing.T, b store.Backend) {
	w := openAudit(t, b, audit.Options{})
	emit(t, w, kubeEvent("alice", "prod", "get", t0))
	r := openAudit(t, b, audit.Options{ReadOnly: true})
	got, err := r.Search(ctx, audit.Query{})
	if err != nil || len(got) != 1 {
		t.Fatalf("read-only search: %d %v", len(got), err)
	}
	if err := r.Emit(ctx, kubeEvent("alice", "prod", "get", t0)); !errors.Is(err, audit.ErrUnavailable) {
		t.Fatalf("emit on a read-only store: %v", err)
	}
}

// testSignIns: the console's sign-ins are found by digest until they
// expire, and gone once deleted (the driver is the portable API here: the
// console's wrapper only encodes the principal).
func testSignIns(t *testing.T, b store.Backend) {
	s := must[store.SignIns](t)(b.SignIns(ctx))
	now := t0.UnixNano()
	live := store.SignInRecord{Digest: strings.Repeat("a", 64), Principal: `{"kind":"user","name":"alice"}`, CSRF: "c1",
		Expires: now + int64(time.Hour), Local: true}
	short := store.SignInRecord{Digest: strings.Repeat("b", 64), Principal: `{"kind":"user","name":"bob"}`, CSRF: "c2",
		Expires: now + int64(time.Minute)}
	for _, r := range []store.SignInRecord{live, short} {
		if err := s.Put(ctx, r, now); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.Get(ctx, live.Digest, now); err != nil || got != live {
		t.Fatalf("get: %+v %v, want %+v", got, err, live)
	}
	if _, err := s.Get(ctx, short.Digest, now+int64(time.Minute)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("expired sign-in: %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, strings.Repeat("c", 64), now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown sign-in: %v", err)
	}
	if err := s.Delete(ctx, live.Digest); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, live.Digest, now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("signed-out sign-in: %v", err)
	}
}

// testPolicyFloor: the floor only rises, by key (numbers, not strings),
// also when proxies raise it at once; refusals come back newest first.
func testPolicyFloor(t *testing.T, b store.Backend) {
	p := must[store.Policy](t)(b.Policy(ctx))
	if _, ok, err := p.Floor(ctx); ok || err != nil {
		t.Fatalf("floor of a new store: %v %v", ok, err)
	}
	rec := func(rev string) store.FloorRecord {
		return store.FloorRecord{Revision: rev, Key: fmt.Sprintf("%020s", rev), Digest: []byte(strings.Repeat(rev[:1], 32))}
	}
	var wg sync.WaitGroup
	for _, rev := range []string{"9", "10", "3", "10", "2"} {
		wg.Go(func() {
			if _, err := p.RaiseFloor(ctx, rec(rev)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got, err := p.RaiseFloor(ctx, rec("4"))
	if err != nil || got.Revision != "10" || string(got.Digest) != strings.Repeat("1", 32) {
		t.Fatalf("raise to 4 after 10: %+v %v, want 10 kept", got, err)
	}
	if f, ok, err := p.Floor(ctx); !ok || err != nil || f.Revision != "10" {
		t.Fatalf("floor: %+v %v %v", f, ok, err)
	}
	if got, err = p.RaiseFloor(ctx, rec("11")); err != nil || got.Revision != "11" {
		t.Fatalf("raise to 11: %+v %v", got, err)
	}
	for i, r := range []string{"1", "2", "3"} {
		if err := p.AddRefusal(ctx, store.RefusalRecord{TimeNS: int64(i), Reason: "rollback", Revision: r, ProxyID: "p" + r}); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := p.Refusals(ctx, 2)
	if err != nil || len(rs) != 2 || rs[0].Revision != "3" || rs[1].Revision != "2" || rs[0].ProxyID != "p3" {
		t.Fatalf("refusals: %+v %v, want 3 then 2", rs, err)
	}
}

// testSessions: the directory keeps each session's last record, never
// turns an ended session live again (a start written behind its end), and
// lists the newest first.
func testSessions(t *testing.T, b store.Backend) {
	d := must[store.Sessions](t)(b.Sessions(ctx))
	rec := func(id, proxy string, start, end int64) store.SessionRecord {
		return store.SessionRecord{ID: id, Proxy: proxy, Info: fmt.Sprintf(`{"id":%q}`, id), StartNS: start, EndNS: end}
	}
	for _, r := range []store.SessionRecord{
		rec("s1", "proxy-a", 10, 0),
		rec("s2", "proxy-b", 20, 0),
		rec("s1", "proxy-a", 10, 15), // s1 ends
		rec("s3", "proxy-a", 30, 40),
		rec("s3", "proxy-a", 30, 0), // a start written behind the end
	} {
		if err := d.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := d.Get(ctx, "s3")
	if err != nil || got.EndNS != 40 {
		t.Fatalf("s3: %+v %v, want it ended at 40", got, err)
	}
	if got, err = d.Get(ctx, "s1"); err != nil || got.EndNS != 15 || got.Proxy != "proxy-a" {
		t.Fatalf("s1: %+v %v", got, err)
	}
	if _, err := d.Get(ctx, "s9"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
	list, err := d.List(ctx, 2)
	if err != nil || len(list) != 2 || list[0].ID != "s3" || list[1].ID != "s2" {
		t.Fatalf("list: %+v %v, want s3 then s2", list, err)
	}
	// A kill request marks a live session only, and a later record of the
	// session (its end, written by the proxy that killed it) keeps the mark.
	if _, err := d.RequestKill(ctx, "s1", "user:admin"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("kill of an ended session: %v, want ErrNotFound", err)
	}
	if _, err := d.RequestKill(ctx, "s9", "user:admin"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("kill of an unknown session: %v, want ErrNotFound", err)
	}
	if got, err := d.RequestKill(ctx, "s2", "user:admin"); err != nil || got.KillBy != "user:admin" || got.Proxy != "proxy-b" {
		t.Fatalf("kill of s2: %+v %v", got, err)
	}
	if err := d.Put(ctx, rec("s2", "proxy-b", 20, 25)); err != nil {
		t.Fatal(err)
	}
	if got, err := d.Get(ctx, "s2"); err != nil || got.KillBy != "user:admin" || got.EndNS != 25 {
		t.Fatalf("s2 after its end: %+v %v, want the kill mark kept", got, err)
	}
}
