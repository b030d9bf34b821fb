package sessions

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/locks"
)

// plain is a request that opens no stream.
func plain(id, name string) Session {
	return Session{ID: id, Principal: user(name), Cluster: "dev", Expires: time.Now().Add(time.Hour)}
}

func TestTrackGuardsEveryResponseAgainstLocks(t *testing.T) {
	set := locks.NewSet()
	r, e := newReg(t, set)
	a, err := r.Track(context.Background(), plain("g1", "alice"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Track(context.Background(), plain("g2", "bob"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.End(ReasonCompleted)
	if list := r.List(); len(list) != 0 {
		t.Fatalf("guarded requests are listed as sessions: %+v", list)
	}
	if r.Kill("g1") {
		t.Fatal("Kill found a request that is not a session")
	}
	set.Apply(locks.Change{Op: locks.OpSet, Lock: lockOf("alice")})
	// Apply has run the callback: alice's response is already cancelled.
	if a.Context().Err() == nil {
		t.Fatal("a lock left alice's response running")
	}
	if cause := context.Cause(a.Context()); !errors.Is(cause, locks.ErrLocked) || a.Ended().Reason != ReasonLocked {
		t.Fatalf("cause %v, ended %+v; want the lock", cause, a.Ended())
	}
	if b.Context().Err() != nil {
		t.Fatal("alice's lock ended bob's response")
	}
	if a.End(ReasonCompleted) {
		t.Fatal("End reported ending a response the lock had ended")
	}
	if len(e.reasons()) != 0 {
		t.Fatalf("guarded requests reached OnEnd (session.end): %v", e.reasons())
	}
	if list := r.List(); len(list) != 0 {
		t.Fatalf("an ended guarded request is listed: %+v", list)
	}
}

func TestTrackGuardRefusesLockedAndExpired(t *testing.T) {
	set := locks.NewSet()
	set.Apply(locks.Change{Op: locks.OpSet, Lock: lockOf("mallory")})
	r, _ := newReg(t, set)
	_, err := r.Track(context.Background(), plain("m", "mallory"))
	if !errors.Is(err, locks.ErrLocked) || err.Error() != "user mallory is locked by user:admin: incident 42" {
		t.Fatalf("locked: %v, want the lock named", err)
	}
	late := plain("late", "alice")
	late.Expires = time.Now().Add(-time.Second)
	var ended *Ended
	if _, err := r.Track(context.Background(), late); !errors.As(err, &ended) || ended.Reason != ReasonExpired {
		t.Fatalf("expired grant: %v, want *Ended expired", err)
	}
}

func TestTrackGuardEndsOnExpiryAndClient(t *testing.T) {
	r, _ := newReg(t, locks.NewSet())
	s := plain("e", "alice")
	s.Expires = time.Now().Add(50 * time.Millisecond)
	l, err := r.Track(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, l)
	if l.Ended() == nil || l.Ended().Reason != ReasonExpired {
		t.Fatalf("ended %+v, want expired", l.Ended())
	}
	l.End(ReasonCompleted)

	type key struct{}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	c, err := r.Track(ctx, plain("c", "alice"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Context().Value(key{}) != "v" {
		t.Fatal("the guarded context lost the request's values")
	}
	cancel()
	waitDone(t, c)
	c.End(ReasonClientClosed)
}

// TestTrackGuardCostsNoGoroutine holds many guarded requests open at once:
// guarding every ordinary response must not cost a goroutine each.
func TestTrackGuardCostsNoGoroutine(t *testing.T) {
	set := locks.NewSet()
	r, _ := newReg(t, set)
	const n = 200
	before := runtime.NumGoroutine()
	lives := make([]*Live, n)
	for i := range lives {
		l, err := r.Track(context.Background(), plain(fmt.Sprint("n", i), "alice"))
		if err != nil {
			t.Fatal(err)
		}
		lives[i] = l
	}
	if grew := runtime.NumGoroutine() - before; grew >= n/2 {
		t.Fatalf("%d guarded requests started %d goroutines", n, grew)
	}
	set.Apply(locks.Change{Op: locks.OpSet, Lock: lockOf("alice")})
	for _, l := range lives {
		if l.Context().Err() == nil {
			t.Fatal("a guarded request survived the lock")
		}
		l.End(ReasonCompleted)
	}
}

func TestTrackRegistersStreams(t *testing.T) {
	r, e := newReg(t, locks.NewSet())
	s := plain("w", "alice")
	s.Kind, s.Target = KindWatch, "default/configmaps"
	l, err := r.Track(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if i, ok := r.Get("w"); !ok || !i.Live() || i.Kind != KindWatch {
		t.Fatalf("a tracked watch is not listed: %+v %v", i, ok)
	}
	if !r.Kill("w") {
		t.Fatal("Kill did not find the watch")
	}
	waitDone(t, l)
	if e.reasons()["w"] != ReasonKilled {
		t.Fatalf("OnEnd reasons %v, want w killed", e.reasons())
	}
	bad := plain("b", "alice")
	bad.Kind = "shell"
	if _, err := r.Track(context.Background(), bad); err == nil {
		t.Fatal("Track accepted an unknown kind")
	}
}

// TestTrackConcurrent guards, ends and locks at once; run with -race.
func TestTrackConcurrent(t *testing.T) {
	set := locks.NewSet()
	r, _ := newReg(t, set)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 200 {
				l, err := r.Track(context.Background(), plain(fmt.Sprintf("w%d-%d", w, i), fmt.Sprint("u", i%3)))
				if err != nil {
					continue // locked at the moment
				}
				l.AddBytes(1, 1)
				l.End(ReasonCompleted)
			}
		})
	}
	wg.Go(func() {
		for i := range 100 {
			set.Apply(locks.Change{Op: locks.OpSet, Lock: lockOf(fmt.Sprint("u", i%3))})
			set.Apply(locks.Change{Op: locks.OpRemove, Lock: lockOf(fmt.Sprint("u", i%3))})
		}
	})
	wg.Wait()
}

// TestRegisterCostsNoGoroutine holds many idle streams (watches) open at
// once: a listed session's watchdog is callbacks, not a goroutine each, and
// still ends each stream on its principal's lock, its grant's expiry and its
// client going away, reporting each end once.
func TestRegisterCostsNoGoroutine(t *testing.T) {
	set := locks.NewSet()
	r, e := newReg(t, set)
	const n = 200
	before := runtime.NumGoroutine()
	stream := func(id, name string) Session {
		s := plain(id, name)
		s.Kind, s.Target = KindWatch, "default/configmaps"
		return s
	}
	lives := make([]*Live, n)
	for i := range lives {
		l, err := r.Register(context.Background(), stream(fmt.Sprint("w", i), "alice"))
		if err != nil {
			t.Fatal(err)
		}
		lives[i] = l
	}
	if grew := runtime.NumGoroutine() - before; grew >= n/2 {
		t.Fatalf("%d idle streams started %d goroutines", n, grew)
	}
	set.Apply(locks.Change{Op: locks.OpSet, Lock: lockOf("alice")})
	for _, l := range lives {
		waitDone(t, l)
		if l.Ended().Reason != ReasonLocked {
			t.Fatalf("ended %+v, want locked", l.Ended())
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	gone, err := r.Register(ctx, stream("gone", "bob"))
	if err != nil {
		t.Fatal(err)
	}
	s := stream("expires", "bob")
	s.Expires = time.Now().Add(50 * time.Millisecond)
	expiring, err := r.Register(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	waitDone(t, gone)
	waitDone(t, expiring)
	if gone.Ended().Reason != ReasonClientClosed || expiring.Ended().Reason != ReasonExpired {
		t.Fatalf("ended %+v and %+v, want client_closed and expired", gone.Ended(), expiring.Ended())
	}
	r.Close() // waits for every end to be reported
	if got := len(e.reasons()); got != n+2 {
		t.Fatalf("%d ends reported, want %d", got, n+2)
	}
	if gone.End(ReasonCompleted) {
		t.Fatal("End ended a session twice")
	}
}
