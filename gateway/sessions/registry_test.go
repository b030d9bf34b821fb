package sessions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
)

const bound = 2 * time.Second

func user(name string) identity.Principal {
	return identity.Principal{Kind: identity.KindUser, Name: name}
}

func sess(id, name string) Session {
	return Session{ID: id, Principal: user(name), Cluster: "dev", Kind: KindExec, Target: "default/web/app"}
}

func lockOf(name string) locks.Lock {
	return locks.Lock{Target: locks.TargetOf(user(name)), Reason: "incident 42", CreatedBy: "user:admin", CreatedAt: time.Now()}
}

// ends collects OnEnd calls.
type ends struct {
	mu   sync.Mutex
	seen []Info
}

func (e *ends) add(i Info) { e.mu.Lock(); e.seen = append(e.seen, i); e.mu.Unlock() }

func (e *ends) reasons() map[string]Reason {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := map[string]Reason{}
	for _, i := range e.seen {
		m[i.ID] = i.Reason
	}
	return m
}

func newReg(t *testing.T, set *locks.Set) (*Registry, *ends) {
	e := &ends{}
	r := New(Config{Locks: set, OnEnd: e.add, Recent: 4, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(r.Close)
	return r, e
}

func waitDone(t *testing.T, l *Live) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-l.Done():
		return time.Since(start)
	case <-time.After(bound):
		t.Fatalf("session %s still live after %s", l.ID(), bound)
		return 0
	}
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(d)
	return d[len(d)/2], d[(len(d)*99)/100]
}

func TestLockEndsIdleSessionsOfThatUserOnly(t *testing.T) {
	set := locks.NewSet()
	r, e := newReg(t, set)
	var lat []time.Duration
	for run := range 20 {
		a, err := r.Register(context.Background(), sess(fmt.Sprint("a", run), "alice"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := r.Register(context.Background(), sess(fmt.Sprint("b", run), "bob"))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		set.Apply(locks.Change{Op: locks.OpSet, Lock: lockOf("alice")})
		waitDone(t, a)
		lat = append(lat, time.Since(start))

		cause := context.Cause(a.Context())
		if !errors.Is(cause, locks.ErrLocked) {
			t.Fatalf("cause %v does not match locks.ErrLocked", cause)
		}
		if a.Ended().Reason != ReasonLocked || a.Info().Detail == "" {
			t.Fatalf("ended %+v, want locked with the lock as detail", a.Info())
		}
		if b.Ended() != nil {
			t.Fatal("bob's session ended on alice's lock")
		}
		b.End(ReasonCompleted)
		set.Apply(locks.Change{Op: locks.OpRemove, Lock: lockOf("alice")})
	}
	p50, p99 := percentiles(lat)
	t.Logf("lock → session end over %d runs: p50 %s, p99 %s", len(lat), p50, p99)
	// OnEnd runs on the goroutine that ended the session, after Done is
	// closed: wait for it rather than assume it has run.
	deadline := time.Now().Add(bound)
	for e.reasons()["a0"] == "" && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := e.reasons()["a0"]; got != ReasonLocked {
		t.Fatalf("OnEnd reason %q, want locked", got)
	}
}

func TestRegisterRefuses(t *testing.T) {
	set := locks.NewSet()
	set.Apply(locks.Change{Op: locks.OpSet, Lock: lockOf("mallory")})
	r, _ := newReg(t, set)
	if _, err := r.Register(context.Background(), sess("dup", "alice")); err != nil {
		t.Fatal(err)
	}
	expired := sess("late", "alice")
	expired.Expires = time.Now().Add(-time.Second)
	bad := sess("x", "alice")
	bad.Kind = "shell"
	tests := []struct {
		name string
		s    Session
		is   error
	}{
		{"locked", sess("m1", "mallory"), locks.ErrLocked},
		{"duplicate", sess("dup", "alice"), ErrDuplicate},
		{"expired grant", expired, nil},
		{"bad kind", bad, nil},
		{"bad id", sess("a b", "alice"), nil},
		{"no id", sess("", "alice"), nil},
		{"bad principal", Session{ID: "p", Kind: KindExec}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := r.Register(context.Background(), tt.s)
			if err == nil {
				t.Fatalf("Register succeeded: %+v", l.Info())
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("err %v, want %v", err, tt.is)
			}
			t.Log(err)
		})
	}
	var ended *Ended
	if _, err := r.Register(context.Background(), expired); !errors.As(err, &ended) || ended.Reason != ReasonExpired {
		t.Fatalf("expired grant: %v, want *Ended expired", err)
	}
	if _, err := r.Register(context.Background(), sess("m2", "mallory")); err == nil ||
		err.Error() != "user mallory is locked by user:admin: incident 42" {
		t.Fatalf("locked refusal %v does not name the lock and reason", err)
	}
	r.Close()
	if _, err := r.Register(context.Background(), sess("after", "alice")); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
}

func TestKillLeavesOtherSessionsOfSameUser(t *testing.T) {
	r, e := newReg(t, locks.NewSet())
	one, _ := r.Register(context.Background(), sess("one", "alice"))
	two, _ := r.Register(context.Background(), sess("two", "alice"))
	start := time.Now()
	if !r.Kill("one") {
		t.Fatal("Kill(one) = false")
	}
	waitDone(t, one)
	t.Logf("kill → session end: %s", time.Since(start))
	if one.Ended().Reason != ReasonKilled || e.reasons()["one"] != ReasonKilled {
		t.Fatalf("one ended %+v", one.Info())
	}
	select {
	case <-two.Done():
		t.Fatal("killing one session ended the other")
	case <-time.After(50 * time.Millisecond):
	}
	if r.Kill("one") || r.Kill("nope") {
		t.Fatal("Kill of an ended or unknown session reported true")
	}
}

func TestGrantExpiryEndsIdleSession(t *testing.T) {
	r, _ := newReg(t, nil)
	var late []time.Duration
	for run := range 5 {
		s := sess(fmt.Sprint("e", run), "alice")
		s.Expires = time.Now().Add(100 * time.Millisecond)
		l, err := r.Register(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		waitDone(t, l)
		late = append(late, time.Since(s.Expires))
		if l.Ended().Reason != ReasonExpired {
			t.Fatalf("reason %q, want expired", l.Ended().Reason)
		}
	}
	p50, p99 := percentiles(late)
	t.Logf("grant expiry → session end, lateness over %d runs: p50 %s, max %s", len(late), p50, p99)
}

func TestClientGoneEndsSession(t *testing.T) {
	r, _ := newReg(t, nil)
	type key struct{}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	l, _ := r.Register(ctx, sess("c", "alice"))
	if l.Context().Value(key{}) != "v" {
		t.Fatal("session context lost the request's values")
	}
	cancel()
	waitDone(t, l)
	if l.Ended().Reason != ReasonClientClosed {
		t.Fatalf("reason %q, want client_closed", l.Ended().Reason)
	}
}

// TestClientGoneNamesTheCause: with Config.ClientGone, a client context
// ended by a cause it names (the worker: the tunnel died, the proxy is
// lost) ends the session with that reason and the cause as its detail;
// any other cause is still client_closed.
func TestClientGoneNamesTheCause(t *testing.T) {
	lost := errors.New("tunnel: closed: session ended")
	r := New(Config{Logger: slog.New(slog.DiscardHandler), ClientGone: func(cause error) (Reason, bool) {
		return ReasonProxyLost, errors.Is(cause, lost)
	}})
	t.Cleanup(r.Close)
	for _, tc := range []struct {
		cause  error
		reason Reason
		detail string
	}{{lost, ReasonProxyLost, lost.Error()}, {nil, ReasonClientClosed, ""}} {
		ctx, cancel := context.WithCancelCause(context.Background())
		l, err := r.Register(ctx, sess(fmt.Sprint("g-", tc.reason), "alice"))
		if err != nil {
			t.Fatal(err)
		}
		cancel(tc.cause)
		waitDone(t, l)
		if e := l.Ended(); e.Reason != tc.reason || e.Detail() != tc.detail {
			t.Errorf("cause %v: ended %q (%q), want %q (%q)", tc.cause, e.Reason, e.Detail(), tc.reason, tc.detail)
		}
	}
}

// TestLoseAfterTellsFirst: LoseAfter's tell runs while the session is
// still live, and the client hanging up during it (having read its last
// word) does not take the session's end: it stays worker_lost.
func TestLoseAfterTellsFirst(t *testing.T) {
	r, _ := newReg(t, nil)
	ctx, hangUp := context.WithCancel(context.Background())
	l, err := r.Register(ctx, sess("lost", "alice"))
	if err != nil {
		t.Fatal(err)
	}
	lost := errors.New("tunnel: closed")
	var liveDuringTell bool
	l.LoseAfter(lost, func() {
		liveDuringTell = l.Context().Err() == nil
		hangUp()
		time.Sleep(50 * time.Millisecond) // the watchdog sees the client gone
	})
	waitDone(t, l)
	if !liveDuringTell {
		t.Error("the session had ended before tell ran: its client's connection may be closed under the last word")
	}
	if e := l.Ended(); e.Reason != ReasonWorkerLost || e.Detail() != lost.Error() {
		t.Errorf("ended %q (%q), want worker_lost (%q)", e.Reason, e.Detail(), lost)
	}
	if l.LoseAfter(lost, func() { t.Error("tell ran for a session already ended") }) {
		t.Error("LoseAfter ended a session twice")
	}
}

func TestEndFailListAndRing(t *testing.T) {
	r, _ := newReg(t, nil) // Recent: 4
	var lives []*Live
	for i := range 6 {
		s := sess(fmt.Sprint("s", i), "alice")
		s.Start = time.Now().Add(time.Duration(i) * time.Second)
		l, err := r.Register(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		l.AddBytes(int64(i), 10)
		lives = append(lives, l)
	}
	lives[5].AddBytes(1, 0)
	for i := range 5 {
		if !lives[i].End(ReasonCompleted) {
			t.Fatal("End returned false on a live session")
		}
	}
	if lives[0].End(ReasonError) {
		t.Fatal("second End returned true")
	}
	list := r.List()
	ids := make([]string, len(list))
	for i, in := range list {
		ids[i] = in.ID
	}
	want := []string{"s5", "s4", "s3", "s2", "s1"} // live first, then the 4 newest ended
	if !slices.Equal(ids, want) {
		t.Fatalf("List ids %v, want %v", ids, want)
	}
	// Get finds what List lists, live or ended, and not what the ring let go.
	for _, in := range list {
		if got, ok := r.Get(in.ID); !ok || !reflect.DeepEqual(got, in) {
			t.Fatalf("Get(%s) = %+v, %v; List has %+v", in.ID, got, ok, in)
		}
	}
	if got, ok := r.Get("s0"); ok {
		t.Fatalf("Get(s0) = %+v, an ended session the ring no longer holds", got)
	}
	if !list[0].Live() || list[0].BytesIn != 6 || list[0].BytesOut != 10 {
		t.Fatalf("live entry %+v", list[0])
	}
	if list[1].Live() || list[1].Reason != ReasonCompleted || list[1].End.IsZero() {
		t.Fatalf("ended entry %+v", list[1])
	}
	lives[5].Fail(errors.New("recording write failed"))
	i, ok := r.Get("s5")
	if !ok || i.Reason != ReasonError || i.Detail != "recording write failed" {
		t.Fatalf("Get(s5) = %+v, %v", i, ok)
	}
}

func TestCloseEndsAllAndStopsWatchdogs(t *testing.T) {
	set := locks.NewSet()
	r := New(Config{Locks: set, Logger: slog.New(slog.DiscardHandler)})
	var lives []*Live
	for i := range 10 {
		s := sess(fmt.Sprint("c", i), "alice")
		s.Expires = time.Now().Add(time.Hour)
		l, _ := r.Register(context.Background(), s)
		lives = append(lives, l)
	}
	r.Close()
	for _, l := range lives {
		if l.Ended() == nil || l.Ended().Reason != ReasonShutdown {
			t.Fatalf("after Close: %+v", l.Info())
		}
	}
	// Close waited for every watchdog, and they cancelled their watches.
	if ch, cancel := set.Watch(user("alice")); ch == nil {
		t.Fatal("nil channel")
	} else {
		cancel()
	}
}

// TestConcurrent registers, ends, kills and locks at once; run with -race.
func TestConcurrent(t *testing.T) {
	set := locks.NewSet()
	r, _ := newReg(t, set)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 100 {
				id := fmt.Sprintf("w%d-%d", w, i)
				l, err := r.Register(context.Background(), sess(id, fmt.Sprint("u", i%3)))
				if err != nil {
					continue // locked at the moment
				}
				l.AddBytes(1, 1)
				_ = l.Info()
				if i%2 == 0 {
					r.Kill(id)
				} else {
					l.End(ReasonCompleted)
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 100 {
			set.Apply(locks.Change{Op: locks.OpSet, Lock: lockOf(fmt.Sprint("u", i%3))})
			_ = r.List()
			set.Apply(locks.Change{Op: locks.OpRemove, Lock: lockOf(fmt.Sprint("u", i%3))})
		}
	})
	wg.Wait()
	for _, i := range r.List() {
		if i.Live() {
			t.Fatalf("session %s still live", i.ID)
		}
	}
}

// TestOnEndedObservers: every observer added after the registry was built
// hears of each ended session once, with its reason, after OnEnd.
func TestOnEndedObservers(t *testing.T) {
	r, e := newReg(t, nil)
	var mu sync.Mutex
	var got []string
	for _, name := range []string{"first", "second"} {
		r.OnEnded(func(i Info) {
			mu.Lock()
			defer mu.Unlock()
			if e.reasons()[i.ID] == "" {
				t.Errorf("observer %s ran before OnEnd for %s", name, i.ID)
			}
			got = append(got, name+":"+i.ID+":"+string(i.Reason))
		})
	}
	l, err := r.Register(context.Background(), sess("s1", "alice"))
	if err != nil {
		t.Fatal(err)
	}
	l.End(ReasonCompleted)
	l.End(ReasonCompleted) // once only
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"first:s1:completed", "second:s1:completed"}; !slices.Equal(got, want) {
		t.Fatalf("observers saw %v, want %v", got, want)
	}
}
