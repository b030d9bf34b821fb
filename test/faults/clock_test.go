package faults

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/impersonate"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/worker"
	"github.com/limenhq/limen/test/gatewaytest"
)

// skewClock is the worker's clock, off by a settable offset: a test clock
// stands in for the host's, which a test cannot move without moving every
// other process's.
type skewClock struct{ off atomic.Int64 }

func (c *skewClock) Now() time.Time      { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *skewClock) set(d time.Duration) { c.off.Store(int64(d)) }

// clockGrantTTL is the proxy's --grant-ttl in this scenario: short, so
// that an hour's jump makes every grant expired to the worker, and so that
// a stream's end at its grant's expiry comes within the test.
const clockGrantTTL = 40 * time.Second

// TestWorkerClockJumps runs the worker in this process with a test clock
// (worker.Handler.Now, which verifies grants and checks locks), under load,
// and moves it an hour forward, back, an hour behind, and back. Documented
// (docs/SECURITY.md, docs/OPERATING.md): a grant past its expiry is
// refused, and so is one issued more than grant.MaxClockSkew (30 s) after
// the worker's now; so while the clock is off every request is refused
// (403, "Limen grant refused", audited), and served again as soon as it is
// right. A stream's end at its grant's expiry runs on the monotonic
// clock: an exec opened before the jumps ends within a second of its
// grant's lifetime, neither later (outliving its grant) nor at once.
func TestWorkerClockJumps(t *testing.T) {
	needFull(t)
	env := startGateway(t, &setup{opts: gatewaytest.Options{ProxyArgs: []string{"--grant-ttl", clockGrantTTL.String()}}})
	ctx := context.Background()
	kc, err := env.Login(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	clock := inProcessWorker(t, env)
	l := startLoad(t, env, kc)
	time.Sleep(3 * time.Second)
	long := longExec(t, l)

	var saw []string
	var back []string
	var slowest time.Duration
	for _, jump := range []struct {
		name string
		off  time.Duration
		says string
	}{
		{"an hour forward", time.Hour, "expired"},
		{"an hour back", -time.Hour, "not yet valid"},
	} {
		start := time.Now()
		clock.set(jump.off)
		took := l.refusedWithin(t, start, 15*time.Second, jump.says)
		time.Sleep(8 * time.Second)
		l.mu.Lock()
		for _, g := range l.gets {
			if !g.served && !g.at.Before(start) && (g.code != 403 || !strings.Contains(g.msg, "Limen grant refused")) {
				t.Errorf("worker clock %s: a GET got %d %q, want 403 Limen grant refused", jump.name, g.code, g.msg)
				break
			}
		}
		l.mu.Unlock()
		served, refused := l.served(start, time.Now())
		saw = append(saw, fmt.Sprintf("worker clock %s: first refusal %s after the jump, %d GETs refused, %d served %v",
			jump.name, took.Round(time.Millisecond), refused, served, l.refusals(start)))
		fixed := time.Now()
		clock.set(0)
		took = l.recovered(t, fixed, 15*time.Second)
		slowest = max(slowest, took)
		back = append(back, fmt.Sprintf("%s after the clock was set right (%s)", took.Round(time.Millisecond), jump.name))
	}
	lived := long.wait(t, clockGrantTTL+30*time.Second)
	if lived > clockGrantTTL+time.Second {
		t.Errorf("an exec lived %s through the clock jumps, past its grant's %s", lived.Round(time.Millisecond), clockGrantTTL)
	}
	time.Sleep(6 * time.Second)
	v := checkInvariants(t, l, invariantsOpts{user: "alice", proxyDir: env.ProxyDataDir()})
	report(t, figures{scenario: "worker-clock", saw: strings.Join(saw, "; "), recovered: slowest, v: v,
		extra: fmt.Sprintf("served again %s; an exec opened before the jumps ended %s after it started (grant TTL %s): %s",
			strings.Join(back, ", "), lived.Round(time.Millisecond), clockGrantTTL, long.how())})
}

// inProcessWorker replaces the Env's worker process with the same worker
// (its enrollment, data directory and flags' equivalents) built in this
// process, whose clock the test moves.
func inProcessWorker(t *testing.T, env *gatewaytest.Env) *skewClock {
	t.Helper()
	ctx := context.Background()
	env.StopWorker()
	if err := env.WaitWorker(ctx, false); err != nil {
		t.Fatal(err)
	}
	id, err := enroll.LoadWorkerIdentity(env.WorkerDataDir())
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(env.Dir, "worker-inprocess.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	s, err := worker.New(ctx, worker.Config{Identity: id, DataDir: env.WorkerDataDir(),
		APIServer: env.Cluster.Server, CAFile: env.Cluster.CAFile, TokenFile: env.TokenFile,
		Labels: map[string]string{"env": "dev"}, Impersonation: impersonate.Config{Mode: env.RBAC()},
		Policy: policy.Options{PersistDir: filepath.Join(env.WorkerDataDir(), "policy")}, Handover: -1,
		Logger: slog.New(slog.NewTextHandler(logf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	clock := &skewClock{}
	s.Handler.Now = clock.Now
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done; s.Close() })
	if err := env.WaitWorker(ctx, true); err != nil {
		t.Fatal(err)
	}
	return clock
}

// streamRun is one exec that prints until Limen ends it.
type streamRun struct {
	start time.Time
	done  chan struct{}
	end   time.Time
	err   error
	out   syncBuffer
	errb  syncBuffer
}

// syncBuffer is a strings.Builder safe to read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// longExec starts an exec printing forever as the load's user.
func longExec(t *testing.T, l *load) *streamRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	r := &streamRun{start: time.Now(), done: make(chan struct{})}
	cmd := exec.CommandContext(ctx, l.kubectl, "--kubeconfig", l.kubeconfig, "-n", l.ns, "exec", l.pod, "--",
		"sh", "-c", `while :; do echo long; sleep 0.1; done`)
	cmd.Stdout, cmd.Stderr = &r.out, &r.errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.err = cmd.Wait(); r.end = time.Now(); close(r.done) }()
	for !strings.Contains(r.out.String(), "long") { // admitted and relaying
		select {
		case <-r.done:
			t.Fatalf("the long exec ended before it printed: %s", r.how())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return r
}

// wait waits for the exec's end and returns how long it lived.
func (r *streamRun) wait(t *testing.T, within time.Duration) time.Duration {
	t.Helper()
	select {
	case <-r.done:
		return r.end.Sub(r.start)
	case <-time.After(time.Until(r.start.Add(within))):
		t.Fatalf("an exec outlived its grant (%s) by more than %s", clockGrantTTL, within-clockGrantTTL)
		return 0
	}
}

func (r *streamRun) how() string {
	return fmt.Sprintf("%v, %q", r.err, clip(strings.TrimSpace(r.errb.String()), 200))
}
