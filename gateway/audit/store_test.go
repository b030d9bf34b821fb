package audit

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

func TestEmitSearch(t *testing.T) {
	admin := identity.Principal{Kind: identity.KindUser, Name: "root"}
	s, _ := openTemp(t, Options{})
	ctx := context.Background()
	events := []Event{
		kubeEvent("alice", "prod", "get", t0),
		kubeEvent("alice", "prod", "list", t0.Add(time.Minute)),
		kubeEvent("bob", "prod", "get", t0.Add(2*time.Minute)),
		kubeEvent("alice", "dev", "get", t0.Add(3*time.Minute)),
		{Type: TypeAuthDenied, Time: t0.Add(4 * time.Minute), Cluster: "prod", Denied: &Denied{Hop: HopWorker, Action: ActionKube, Reason: "grant expired"}},
		{Type: TypeAuthDenied, Time: t0.Add(5 * time.Minute), Principal: admin, Denied: &Denied{Hop: HopProxy, Action: ActionAdmin, Reason: "locked"}},
		// An admin event whose fields happen to say "action": not a refusal.
		{Type: TypeUserLock, Time: t0.Add(6 * time.Minute), Principal: admin, Fields: map[string]string{"action": ActionAdmin}},
	}
	for _, e := range events {
		if err := s.Emit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		q     Query
		wantN []int // indexes into events, oldest first
	}{
		{"all", Query{}, []int{0, 1, 2, 3, 4, 5, 6}},
		{"user", Query{User: "alice"}, []int{0, 1, 3}},
		{"kind:user", Query{User: "user:bob"}, []int{2}},
		{"cluster", Query{Cluster: "prod"}, []int{0, 1, 2, 4}},
		{"verb", Query{Verb: "get", Cluster: "prod"}, []int{0, 2}},
		{"since", Query{Since: t0.Add(2 * time.Minute)}, []int{2, 3, 4, 5, 6}},
		{"type", Query{Type: TypeAuthDenied}, []int{4, 5}},
		{"action kube", Query{Action: ActionKube}, []int{4}},
		{"action admin", Query{Action: ActionAdmin}, []int{5}},
		{"action and user", Query{Action: ActionAdmin, User: "alice"}, nil},
		{"action login", Query{Action: ActionLogin}, nil},
		{"limit keeps newest", Query{Limit: 2}, []int{5, 6}},
		{"no match", Query{User: "carol"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Search(ctx, tt.q)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.wantN) {
				t.Fatalf("%d events, want %d: %+v", len(got), len(tt.wantN), got)
			}
			for i, idx := range tt.wantN {
				want := events[idx]
				if got[i].ID == 0 || got[i].Type != want.Type || !got[i].Time.Equal(want.Time) || got[i].Principal.Name != want.Principal.Name {
					t.Errorf("event %d = %+v, want %+v", i, got[i], want)
				}
			}
		})
	}
}

func TestEmitRefusesInvalid(t *testing.T) {
	s, _ := openTemp(t, Options{})
	e := kubeEvent("alice", "prod", "get", t0)
	e.Kube.Path = "/api/v1/secrets?token=x"
	if err := s.Emit(context.Background(), e); !errors.Is(err, ErrInvalid) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("Emit = %v, want ErrInvalid", err)
	}
}

func TestConcurrentEmitsShareCommits(t *testing.T) {
	s, _ := openTemp(t, Options{})
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			errs <- s.Emit(context.Background(), kubeEvent(fmt.Sprintf("u%d", i), "prod", "get", t0))
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Search(context.Background(), Query{Limit: 10 * n})
	if err != nil || len(got) != n {
		t.Fatalf("stored %d events (%v), want %d", len(got), err, n)
	}
	if c := s.commits.Load(); c >= n {
		t.Errorf("%d commits for %d concurrent events: no group commit", c, n)
	} else {
		t.Logf("%d events in %d commits", n, c)
	}
}

func TestEmitFailsClosed(t *testing.T) {
	ctx := context.Background()
	e := kubeEvent("alice", "prod", "get", t0)
	tests := []struct {
		name     string
		sabotage func(*Store)
		ctx      func() context.Context
	}{
		{"store closed", func(s *Store) { s.Close() }, nil},
		{"database closed under the batcher", func(s *Store) { s.db.Close() }, nil},
		{"table gone", func(s *Store) {
			if _, err := sqlDB(s).Exec("DROP TABLE events"); err != nil {
				t.Fatal(err)
			}
		}, nil},
		{"caller gave up", func(*Store) {}, func() context.Context {
			c, cancel := context.WithCancel(ctx)
			cancel()
			return c
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := openTemp(t, Options{})
			if err := s.Emit(ctx, e); err != nil {
				t.Fatal(err)
			}
			tt.sabotage(s)
			c := ctx
			if tt.ctx != nil {
				c = tt.ctx()
			}
			err := s.Emit(c, e)
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Emit = %v, want ErrUnavailable", err)
			}
		})
	}
}

func TestReadOnly(t *testing.T) {
	ctx := context.Background()
	w, path := openTemp(t, Options{})
	if err := w.Emit(ctx, kubeEvent("alice", "prod", "get", t0)); err != nil {
		t.Fatal(err)
	}
	// A reader alongside the running writer, as limen audit search does.
	r, err := Open(ctx, path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := r.Search(ctx, Query{User: "alice"})
	if err != nil || len(got) != 1 {
		t.Fatalf("read-only search: %d events, %v", len(got), err)
	}
	if err := r.Emit(ctx, kubeEvent("alice", "prod", "get", t0)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("read-only Emit = %v, want ErrUnavailable", err)
	}
	if _, err := Open(ctx, filepath.Join(t.TempDir(), "missing.db"), Options{ReadOnly: true}); err == nil {
		t.Fatal("read-only open of a missing store succeeded")
	}
}

func TestReopenKeepsEvents(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), FileName)
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Emit(ctx, kubeEvent("alice", "prod", "get", t0)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_ = s.Close() // a second Close must not panic or hang
	s2, err := Open(ctx, path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got, err := s2.Search(ctx, Query{})
	if err != nil || len(got) != 1 {
		t.Fatalf("after reopen: %d events, %v", len(got), err)
	}
}

func TestOpenFails(t *testing.T) {
	if _, err := Open(context.Background(), "/nonexistent-dir/x/audit.db", Options{}); err == nil {
		t.Fatal("Open in a missing directory succeeded")
	}
}

// BenchmarkEmitParallel measures group commit: with p goroutines per CPU
// waiting on Emit, each fsync'd transaction carries many events.
func BenchmarkEmitParallel(b *testing.B) {
	for _, p := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("goroutines-per-cpu=%d", p), func(b *testing.B) {
			s, _ := openTemp(b, Options{})
			e := kubeEvent("alice", "prod", "get", t0)
			b.SetParallelism(p)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := s.Emit(context.Background(), e); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(b.N)/float64(max(1, s.commits.Load())), "events/commit")
		})
	}
}

func BenchmarkEmitSerial(b *testing.B) {
	s, _ := openTemp(b, Options{})
	e := kubeEvent("alice", "prod", "get", t0)
	for b.Loop() {
		if err := s.Emit(context.Background(), e); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// TestOnCommitAndWaiting: every successful commit reports its duration to
// OnCommit, and nothing stays counted as waiting once committed.
func TestOnCommitAndWaiting(t *testing.T) {
	var mu sync.Mutex
	var commits []time.Duration
	s, _ := openTemp(t, Options{OnCommit: func(d time.Duration) { mu.Lock(); commits = append(commits, d); mu.Unlock() }})
	for i := range 3 {
		if err := s.Emit(context.Background(), kubeEvent(fmt.Sprintf("u%d", i), "prod", "get", time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Waiting(); n != 0 {
		t.Errorf("Waiting() = %d after every Emit returned, want 0", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(commits) != 3 {
		t.Fatalf("OnCommit told of %d commits, want 3 (one per serial Emit)", len(commits))
	}
	for _, d := range commits {
		if d <= 0 {
			t.Errorf("commit duration %v", d)
		}
	}
}
