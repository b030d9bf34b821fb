package enroll

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
)

// recorder is an audit sink that refuses invalid events as the store does,
// and stands in for an audit trail that is down while fail is set (a fault
// the real store produces only by being closed for good).
type recorder struct {
	mu     sync.Mutex
	events []audit.Event
	fail   bool
}

func (r *recorder) Emit(_ context.Context, e audit.Event) error {
	if err := e.Validate(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return audit.ErrUnavailable
	}
	r.events = append(r.events, e)
	return nil
}

func (r *recorder) of(typ audit.Type) []audit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []audit.Event
	for _, e := range r.events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

var alice = identity.Principal{Kind: identity.KindUser, Name: "alice"}

type clock struct{ t atomic.Int64 }

func (c *clock) now() time.Time      { return time.Unix(c.t.Load(), 0) }
func (c *clock) add(d time.Duration) { c.t.Add(int64(d / time.Second)) }

func openTokens(t *testing.T, rec *recorder, c *clock) *TokenStore {
	t.Helper()
	c.t.Store(time.Now().Unix())
	s, err := OpenTokenStore(filepath.Join(t.TempDir(), TokenFileName), TokenStoreOptions{Audit: rec, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestTokenSingleUse(t *testing.T) {
	ctx := context.Background()
	rec, c := &recorder{}, &clock{}
	s := openTokens(t, rec, c)
	tok, info, err := s.Create(ctx, "prod", time.Hour, fp, alice)
	if err != nil {
		t.Fatal(err)
	}
	if info.Cluster != "prod" || tok.CAFingerprint != fp {
		t.Fatalf("info %+v, token %+v", info, tok)
	}
	if err := s.Redeem(ctx, tok, "staging", "10.0.0.1"); !errors.Is(err, ErrTokenCluster) {
		t.Fatalf("other cluster: %v", err)
	}
	if err := s.Redeem(ctx, tok, "prod", "10.0.0.1"); err != nil {
		t.Fatalf("first use: %v", err)
	}
	if err := s.Redeem(ctx, tok, "prod", "10.0.0.1"); !errors.Is(err, ErrTokenUsed) {
		t.Fatalf("second use: %v", err)
	}
	other, _ := NewToken(fp)
	if err := s.Redeem(ctx, other, "prod", "10.0.0.1"); !errors.Is(err, ErrTokenUnknown) {
		t.Fatalf("unknown: %v", err)
	}
	created, used, denied := rec.of(audit.TypeTokenCreate), rec.of(audit.TypeTokenUse), rec.of(audit.TypeAuthDenied)
	if len(created) != 1 || created[0].Principal.String() != "user:alice" || created[0].Cluster != "prod" || created[0].Fields["token_id"] != info.ID {
		t.Fatalf("token.create events: %+v", created)
	}
	if len(used) != 1 || used[0].Cluster != "prod" || used[0].ClientAddr != "10.0.0.1" || used[0].Fields["token_id"] != info.ID {
		t.Fatalf("token.use events: %+v", used)
	}
	// Other cluster, reused, unknown: each refusal is an auth.denied.
	if len(denied) != 3 {
		t.Fatalf("auth.denied events: %+v", denied)
	}
	for i, want := range []string{"another cluster", "used already", "not known"} {
		d := denied[i]
		if d.Denied.Hop != audit.HopProxy || d.Denied.Path != Path || !strings.Contains(d.Denied.Reason, want) || d.Fields["token_id"] == "" {
			t.Errorf("refusal %d: %+v %+v, want reason %q", i, d, d.Denied, want)
		}
	}
	list, _ := s.List(ctx)
	if len(list) != 1 || list[0].Used == nil {
		t.Fatalf("List = %+v", list)
	}
}

func TestTokenExpires(t *testing.T) {
	ctx := context.Background()
	c := &clock{}
	s := openTokens(t, &recorder{}, c)
	tok, _, err := s.Create(ctx, "prod", time.Minute, fp, alice)
	if err != nil {
		t.Fatal(err)
	}
	c.add(time.Minute)
	if err := s.Redeem(ctx, tok, "prod", "10.0.0.1"); !errors.Is(err, ErrTokenExpired) {
		t.Fatalf("expired: %v", err)
	}
}

func TestTokenConcurrentRedeemOnce(t *testing.T) {
	ctx := context.Background()
	s := openTokens(t, &recorder{}, &clock{})
	tok, _, _ := s.Create(ctx, "prod", time.Hour, fp, alice)
	var ok atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s.Redeem(ctx, tok, "prod", "10.0.0.1") == nil {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 1 {
		t.Fatalf("%d concurrent redemptions succeeded, want exactly 1", ok.Load())
	}
}

func TestTokenAuditFailsClosed(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	s := openTokens(t, rec, &clock{})
	tok, _, _ := s.Create(ctx, "prod", time.Hour, fp, alice)
	rec.fail = true
	if _, _, err := s.Create(ctx, "prod", time.Hour, fp, alice); err == nil {
		t.Fatal("token created without audit")
	}
	if err := s.Redeem(ctx, tok, "prod", "10.0.0.1"); err == nil {
		t.Fatal("token redeemed without audit")
	}
	rec.fail = false
	if err := s.Redeem(ctx, tok, "prod", "10.0.0.1"); err != nil {
		t.Fatalf("token burnt by the unaudited attempt: %v", err)
	}
	if list, _ := s.List(ctx); len(list) != 1 {
		t.Fatalf("unaudited token was stored: %+v", list)
	}
}

func TestCreateValidates(t *testing.T) {
	s := openTokens(t, &recorder{}, &clock{})
	for _, tt := range []struct {
		cluster string
		ttl     time.Duration
		fp      string
	}{
		{"../x", time.Hour, fp}, {"prod", time.Second, fp}, {"prod", 30 * 24 * time.Hour, fp}, {"prod", time.Hour, "nope"},
	} {
		if _, _, err := s.Create(context.Background(), tt.cluster, tt.ttl, tt.fp, alice); err == nil {
			t.Errorf("Create(%+v) accepted", tt)
		}
	}
}
