package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
)

// Issue 11, "every stream obeys lock, kill and grant expiry, at both hops":
// a kill and a grant's expiry end exec, attach, port-forward, watch and
// followed logs within a second, whichever hop acts first, and the one
// session.end says why (the lock is TestLockEndsOpenStreams). And a watch
// kubectl hangs up on ends at the API server, as the API server itself
// counts it.

const (
	// killRuns and expiryRuns are how many times each stream kind is
	// killed, or outlives its grant; few, to keep make test short.
	killRuns   = 5
	expiryRuns = 5
	// expiryTTL is the grant life of the proxy of the expiry test: long
	// enough for kubectl to open its stream on a busy machine, short enough
	// to wait for five times.
	expiryTTL = 3 * time.Second
)

// endKind is one kind of stream a kill or an expiry must end.
type endKind struct {
	kind sessions.Kind
	// open starts kubectl as the owner of kubeconfig for run; done
	// receives its exit.
	open func(t *testing.T, kubeconfig string, run int) (done <-chan error)
}

// endKinds are exec, attach, port-forward, watch and followed logs on the
// pod talker of ns (which prints), port-forward to port. exec and attach
// alternate from run to run between WebSocket and SPDY, port-forward
// between SPDY and SPDY in WebSocket: each protocol's stream must end.
func endKinds(ns string, port int) []endKind {
	with := func(clients []streamClient, args ...string) func(*testing.T, string, int) <-chan error {
		return func(t *testing.T, kc string, run int) <-chan error {
			_, done := openStreamWith(t, clients[run%len(clients)].bin(t), kc, args...)
			return done
		}
	}
	newest := []streamClient{{}}
	return []endKind{
		{sessions.KindExec, with(execClients, "-n", ns, "exec", "-it", "talker", "--", "sh")},
		{sessions.KindAttach, with(execClients, "-n", ns, "attach", "talker")},
		{sessions.KindPortForward, with(portForwardClients, "-n", ns, "port-forward", "pod/talker", fmt.Sprintf(":%d", port))},
		{sessions.KindWatch, with(newest, "-n", ns, "get", "configmaps", "-w")},
		{sessions.KindLogs, with(newest, "-n", ns, "logs", "-f", "talker")},
	}
}

// runTalker starts the pod endKinds attach to: it prints a line every few
// seconds.
func runTalker(t *testing.T, ns string) {
	t.Helper()
	clustertest.RunPod(t, ns, "talker", []string{"sh", "-c", "while true; do echo tick; sleep 5; done"}, false)
}

// openAll opens every kind for run and returns when each kubectl ended,
// by kind.
func openAll(t *testing.T, kinds []endKind, kubeconfig string, run int) map[sessions.Kind]<-chan time.Time {
	t.Helper()
	ended := map[sessions.Kind]<-chan time.Time{}
	for _, k := range kinds {
		ended[k.kind] = endedAt(k.open(t, kubeconfig, run))
	}
	return ended
}

// endedAt receives the time done fired.
func endedAt(done <-chan error) <-chan time.Time {
	at := make(chan time.Time, 1)
	go func() {
		<-done
		at <- time.Now()
	}()
	return at
}

func kindsOf(kinds []endKind) []sessions.Kind {
	var out []sessions.Kind
	for _, k := range kinds {
		out = append(out, k.kind)
	}
	return out
}

// listSessions is `limen sessions ls --json` on e: its live sessions, then
// the recently ended ones.
func listSessions(t *testing.T, e *gatewaytest.Env) []sessions.Info {
	t.Helper()
	var list []sessions.Info
	out := adminOn(t, e, "sessions", "ls", "--json")
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("limen sessions ls --json: %v: %q", err, out)
	}
	return list
}

// sessionIDs is the set of sessions e lists, live or ended.
func sessionIDs(t *testing.T, e *gatewaytest.Env) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for _, i := range listSessions(t, e) {
		ids[i.ID] = true
	}
	return ids
}

// waitNewSessions waits until e lists, for every kind, one session that is
// not in seen (kubectl opened its stream), and returns them by kind.
func waitNewSessions(t *testing.T, e *gatewaytest.Env, seen map[string]bool, kinds []sessions.Kind) map[sessions.Kind]sessions.Info {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := map[sessions.Kind]sessions.Info{}
		for _, i := range listSessions(t, e) {
			if seen[i.ID] || !slices.Contains(kinds, i.Kind) {
				continue
			}
			if o, dup := got[i.Kind]; dup {
				t.Fatalf("two new %s sessions, %s and %s, where one kubectl opened one", i.Kind, o.ID, i.ID)
			}
			got[i.Kind] = i
		}
		if len(got) == len(kinds) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 20s the proxy listed new sessions of kinds %v, want one of each of %v:\n%s",
				slices.Collect(maps.Keys(got)), kinds, adminOn(t, e, "sessions", "ls"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// storyOn is auditStory for e's audit store.
func storyOn(t *testing.T, e *gatewaytest.Env, id string) story {
	t.Helper()
	st, err := audit.Open(context.Background(), audit.Path(e.ProxyDataDir()), audit.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("open audit store: %v", err)
	}
	defer st.Close()
	return storyIn(t, st, id)
}

// withinASecond logs the p50 and p99 of lat and fails the test when the
// p99 is over a second, the bound of issue 11 for lock, kill and expiry.
func withinASecond(t *testing.T, what string, lat []time.Duration) {
	t.Helper()
	if len(lat) == 0 {
		t.Errorf("%s: nothing measured", what)
		return
	}
	s := slices.Sorted(slices.Values(lat))
	p50, p99 := s[len(s)/2], s[len(s)*99/100]
	t.Logf("%s over %d runs: p50 %s, p99 %s, max %s", what, len(s),
		p50.Round(time.Millisecond), p99.Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
	if p99 > time.Second {
		t.Errorf("%s: p99 %s; it must end within a second", what, p99.Round(time.Millisecond))
	}
}

// TestKillEndsOneStreamWithinASecond opens alice's five kinds of stream at
// once, next to a watch of hers that no kill may touch, and kills them one
// by one: each kubectl ends within a second of `limen sessions kill`, the
// others stream on, and each session.end says killed.
func TestKillEndsOneStreamWithinASecond(t *testing.T) {
	e := gateway(t)
	ns := clustertest.Namespace(t)
	runTalker(t, ns)
	kc := userKubeconfig(t, "alice")
	kinds := endKinds(ns, listenLoopback(t))
	seen := sessionIDs(t, e)
	_, bystanderDone := openStream(t, kc, "-n", ns, "get", "pods", "-w")
	bystander := waitNewSessions(t, e, seen, []sessions.Kind{sessions.KindWatch})[sessions.KindWatch]
	lat := map[sessions.Kind][]time.Duration{}
	for run := range killRuns {
		seen := sessionIDs(t, e)
		ended := openAll(t, kinds, kc, run)
		open := waitNewSessions(t, e, seen, kindsOf(kinds))
		for i, k := range kinds {
			victim := open[k.kind]
			select {
			case <-ended[k.kind]:
				t.Fatalf("run %d: the %s ended before it was killed", run, k.kind)
			default:
			}
			start := time.Now()
			adminOn(t, e, "sessions", "kill", victim.ID)
			select {
			case at := <-ended[k.kind]:
				lat[k.kind] = append(lat[k.kind], at.Sub(start))
			case <-time.After(5 * time.Second):
				t.Fatalf("run %d: the killed %s (session %s) is still open 5s after the kill", run, k.kind, victim.ID)
			}
			// One session ended: alice's others, on the same worker and
			// tunnel, stream on. The proxy ends a killed session before it
			// answers the kill, so its list is settled; a wrong kill of a
			// kubectl not yet ended here fails that session's own kill.
			others := []sessions.Info{bystander}
			for _, o := range kinds[i+1:] {
				others = append(others, open[o.kind])
			}
			live := map[string]bool{}
			for _, s := range listSessions(t, e) {
				live[s.ID] = s.Live()
			}
			for _, o := range others {
				if !live[o.ID] {
					t.Fatalf("run %d: killing the %s (session %s) ended alice's %s (session %s) too", run, k.kind, victim.ID, o.Kind, o.ID)
				}
			}
			select {
			case err := <-bystanderDone:
				t.Fatalf("run %d: killing the %s ended alice's other watch: %v", run, k.kind, err)
			default:
			}
		}
		// One session, one story: whichever hop the kill reached first,
		// the one session.end says killed.
		for _, k := range kinds {
			s := storyOn(t, e, open[k.kind].ID)
			s.check(t, k.kind, nil)
			if end := s.end(); end.EndReason != audit.EndKilled || end.EndHop == "" {
				t.Fatalf("run %d: the %s's session.end says %q by %q (%q), want killed", run, k.kind, end.EndReason, end.EndHop, end.EndDetail)
			}
		}
	}
	for _, k := range kinds {
		withinASecond(t, "kill → "+string(k.kind)+" end (includes the limen sessions kill process)", lat[k.kind])
	}
}

// shortGrantGateway starts a second proxy and worker on the test cluster
// whose grants live ttl: the shared proxy's grants must outlive the other
// tests' streams.
func shortGrantGateway(t *testing.T, ttl time.Duration) *gatewaytest.Env {
	t.Helper()
	return extraGateway(t, "--grant-ttl "+ttl.String(), gatewaytest.Options{ProxyArgs: []string{"--grant-ttl", ttl.String()}})
}

// TestGrantExpiryEndsStreamsWithinASecond opens alice's five kinds of
// stream through a proxy whose grants live three seconds: each kubectl
// ends within a second of the expiry its session lists, not before, and
// each session.end says expired.
func TestGrantExpiryEndsStreamsWithinASecond(t *testing.T) {
	e := shortGrantGateway(t, expiryTTL)
	ns := clustertest.Namespace(t)
	runTalker(t, ns)
	kc, err := e.Login(context.Background(), "alice")
	if err != nil {
		t.Fatalf("login alice: %v", err)
	}
	kinds := endKinds(ns, listenLoopback(t))
	lat := map[sessions.Kind][]time.Duration{}
	for run := range expiryRuns {
		seen := sessionIDs(t, e)
		ended := openAll(t, kinds, kc, run)
		open := waitNewSessions(t, e, seen, kindsOf(kinds))
		for _, k := range kinds {
			s := open[k.kind]
			if s.Expires.IsZero() || s.Expires.Sub(s.Start) > expiryTTL {
				t.Fatalf("run %d: the %s session lists expiry %s for a start at %s, want within %s of it", run, k.kind, s.Expires, s.Start, expiryTTL)
			}
			select {
			case at := <-ended[k.kind]:
				if at.Before(s.Expires) {
					t.Fatalf("run %d: the %s ended %s before its grant expired", run, k.kind, s.Expires.Sub(at))
				}
				lat[k.kind] = append(lat[k.kind], at.Sub(s.Expires))
			case <-time.After(time.Until(s.Expires) + 5*time.Second):
				t.Fatalf("run %d: the %s (session %s) is still open 5s after its grant expired", run, k.kind, s.ID)
			}
		}
		for _, k := range kinds {
			s := storyOn(t, e, open[k.kind].ID)
			s.check(t, k.kind, nil)
			if end := s.end(); end.EndReason != audit.EndExpired || end.EndHop == "" {
				t.Fatalf("run %d: the %s's session.end says %q by %q (%q), want expired", run, k.kind, end.EndReason, end.EndHop, end.EndDetail)
			}
		}
	}
	for _, k := range kinds {
		withinASecond(t, "grant expiry → "+string(k.kind)+" end", lat[k.kind])
	}
}

// TestHungUpWatchEndsAtTheAPIServer opens an idle watch through Limen,
// kills kubectl, and reads from the API server's own gauge of long-running
// requests that its side of the watch ended: the worker cancels the
// upstream request when the proxy closes the tunnel stream, instead of
// holding it until the API server's watch timeout.
func TestHungUpWatchEndsAtTheAPIServer(t *testing.T) {
	e := gateway(t)
	ns := clustertest.Namespace(t)
	kc := userKubeconfig(t, "alice")
	before := apiServerWatches(t)
	seen := sessionIDs(t, e)
	cmd, done := openStream(t, kc, "-n", ns, "get", "configmaps", "-w")
	waitNewSessions(t, e, seen, []sessions.Kind{sessions.KindWatch})
	opened := waitAPIServerWatches(t, "the API server never counted the watch", func(n int) bool { return n > before })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-done
	hungUp := time.Now()
	// The gauge has no namespace label: the count must fall below what it
	// was with the watch open. No other test runs meanwhile (the e2e tests
	// are not parallel), so no other namespaced configmap watch comes or
	// goes.
	n := waitAPIServerWatches(t, "the API server still serves the watch kubectl hung up on", func(n int) bool { return n < opened })
	t.Logf("namespaced configmap watches at the API server: %d before, %d open, %d %s after kubectl was killed",
		before, opened, n, time.Since(hungUp).Round(time.Millisecond))
}

// watchGauge is the API server's gauge of open long-running requests
// (k8s.io/apiserver/pkg/endpoints/metrics), which counts a watch from the
// moment its handler starts until it returns.
const watchGauge = "apiserver_longrunning_requests"

// apiServerWatches reads from the API server's /metrics how many
// namespaced watches of configmaps it serves.
func apiServerWatches(t *testing.T) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := clustertest.Cluster(t).Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("read the API server's /metrics: %v", err)
	}
	found, n := false, 0
	for _, line := range strings.Split(string(b), "\n") {
		labels, ok := strings.CutPrefix(line, watchGauge+"{")
		if !ok {
			continue
		}
		found = true
		labels, value, ok := strings.Cut(labels, "} ")
		if !ok {
			t.Fatalf("unreadable metric line %q", line)
		}
		want := []string{`verb="WATCH"`, `group=""`, `resource="configmaps"`, `subresource=""`, `scope="namespace"`}
		if !all(want, func(l string) bool { return slices.Contains(strings.Split(labels, ","), l) }) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		n += int(v)
	}
	if !found {
		t.Fatalf("the API server's /metrics has no %s; was the gauge renamed?", watchGauge)
	}
	return n
}

func all[T any](s []T, f func(T) bool) bool {
	for _, v := range s {
		if !f(v) {
			return false
		}
	}
	return true
}

// waitAPIServerWatches polls apiServerWatches until ok accepts the count,
// for at most 10s, and returns it.
func waitAPIServerWatches(t *testing.T, failure string, ok func(int) bool) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := apiServerWatches(t)
		if ok(n) {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d namespaced configmap watches after 10s", failure, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
