package locks

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

func user(name string) identity.Principal {
	return identity.Principal{Kind: identity.KindUser, Name: name, LoginID: "l1"}
}

func TestSetLockedAndExpiry(t *testing.T) {
	s := NewSet()
	now := time.Now()
	perm := testLock("alice")
	brief := testLock("bob")
	brief.CreatedAt = now
	brief.Expires = now.Add(time.Hour)
	gone := testLock("carol")
	gone.CreatedAt = now.Add(-2 * time.Hour)
	gone.Expires = now.Add(-time.Hour)
	s.Replace([]Lock{perm, brief, gone})

	tests := []struct {
		name string
		p    identity.Principal
		at   time.Time
		want bool
	}{
		{"permanent", user("alice"), now, true},
		{"traits and login do not matter", identity.Principal{Kind: identity.KindUser, Name: "alice", Traits: map[string][]string{"g": {"x"}}}, now, true},
		{"same name other kind", identity.Principal{Kind: identity.KindBot, Name: "alice"}, now, false},
		{"expiring, before", user("bob"), now.Add(59 * time.Minute), true},
		{"expiring, after", user("bob"), now.Add(time.Hour), false},
		{"expired on arrival", user("carol"), now, false},
		{"unlocked", user("dave"), now, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, got := s.Locked(tt.p, tt.at); got != tt.want {
				t.Fatalf("Locked = %v, want %v", got, tt.want)
			}
			if err := s.Check(tt.p, tt.at); (err != nil) != tt.want {
				t.Fatalf("Check = %v, want locked=%v", err, tt.want)
			}
		})
	}
	if n := len(s.List(now)); n != 2 {
		t.Fatalf("List has %d locks, want 2", n)
	}
	s.Apply(Change{Op: OpRemove, Lock: Lock{Target: TargetOf(user("alice"))}})
	if _, ok := s.Locked(user("alice"), now); ok {
		t.Fatal("alice still locked after remove")
	}
}

func TestWatchFiresOnSetAndWhenAlreadyLocked(t *testing.T) {
	s := NewSet()
	ch, cancel := s.Watch(user("alice"))
	defer cancel()
	other, cancelOther := s.Watch(user("bob"))
	defer cancelOther()

	start := time.Now()
	s.Apply(Change{Op: OpSet, Lock: testLock("alice")})
	select {
	case l := <-ch:
		if l.Target.Name != "alice" {
			t.Fatalf("watch got lock on %s", l.Target)
		}
		t.Logf("lock → watcher: %s", time.Since(start))
	case <-time.After(2 * time.Second):
		t.Fatal("watcher not told within 2s")
	}
	select {
	case l := <-other:
		t.Fatalf("bob's watcher told of %s", l.Target)
	default:
	}

	// Watching someone already locked fires at once: no window between a
	// check and a watch.
	late, cancelLate := s.Watch(user("alice"))
	defer cancelLate()
	select {
	case <-late:
	default:
		t.Fatal("watch of a locked principal did not fire at once")
	}

	cancel()
	cancel() // idempotent
	cancelLate()
	if n := s.watching(TargetOf(user("alice"))); n != 0 {
		t.Fatalf("%d watchers left after cancel", n)
	}
}

func TestNotifyCallsBackSynchronously(t *testing.T) {
	s := NewSet()
	var got []string
	cancel := s.Notify(user("alice"), func(l Lock) { got = append(got, l.Reason) })
	// Apply returns only after every callback ran: nothing to wait for.
	s.Apply(Change{Op: OpSet, Lock: testLock("alice")})
	s.Apply(Change{Op: OpSet, Lock: testLock("bob")})
	if len(got) != 1 {
		t.Fatalf("callbacks after alice's and bob's locks: %q, want alice's only", got)
	}
	// Already locked: called before Notify returns.
	called := false
	cancelLate := s.Notify(user("alice"), func(Lock) { called = true })
	if !called {
		t.Fatal("Notify on a locked principal did not call back at once")
	}
	cancel()
	cancelLate()
	cancel() // idempotent
	s.Apply(Change{Op: OpSet, Lock: testLock("alice")})
	if len(got) != 1 {
		t.Fatalf("called back after cancel: %q", got)
	}
	if n := s.watching(TargetOf(user("alice"))); n != 0 {
		t.Fatalf("%d watchers left after cancel", n)
	}
}

func TestReplaceTellsWatchers(t *testing.T) {
	s := NewSet()
	ch, cancel := s.Watch(user("alice"))
	defer cancel()
	s.Replace([]Lock{testLock("alice")})
	select {
	case <-ch:
	case <-time.After(2 * time.Second):
		t.Fatal("Replace did not tell the watcher")
	}
	s.Replace(nil)
	if _, ok := s.Locked(user("alice"), time.Now()); ok {
		t.Fatal("Replace(nil) left alice locked")
	}
}

// TestSetConcurrent exercises readers, writers and watchers at once; run
// with -race.
func TestSetConcurrent(t *testing.T) {
	s := NewSet()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range 4 {
		wg.Go(func() {
			p := user(fmt.Sprint("u", i))
			for {
				select {
				case <-stop:
					return
				default:
				}
				s.Locked(p, time.Now())
				s.List(time.Now())
			}
		})
	}
	for i := range 4 {
		wg.Go(func() {
			for j := range 200 {
				ch, cancel := s.Watch(user(fmt.Sprint("u", (i+j)%8)))
				select {
				case <-ch:
				default:
				}
				cancel()
			}
		})
	}
	for i := range 2 {
		wg.Go(func() {
			for j := range 200 {
				l := testLock(fmt.Sprint("u", (i+j)%8))
				s.Apply(Change{Op: OpSet, Lock: l})
				s.Apply(Change{Op: OpRemove, Lock: l})
				if j%50 == 0 {
					s.Replace([]Lock{l})
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	if s.Generation() == 0 {
		t.Fatal("generation did not advance")
	}
}

func BenchmarkLocked(b *testing.B) {
	s := NewSet()
	var all []Lock
	for i := range 1000 {
		all = append(all, testLock(fmt.Sprint("u", i)))
	}
	s.Replace(all)
	p := user("nobody")
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		s.Locked(p, now)
	}
}
