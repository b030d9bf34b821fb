package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
	"github.com/limenhq/limen/test/haproxy"
	"github.com/limenhq/limen/test/load"
	"github.com/limenhq/limen/test/postgres"
)

// haBackends names the three proxies in HAProxy: a is proxy 0 (the one the
// worker enrolled with and the admin logs in to), c is proxy 2.
var haBackends = []string{"a", "b", "c"}

// haLoadClients is how many client-go clients share the request load,
// each on its own connection: HAProxy spreads them over the proxies.
const haLoadClients = 6

// haLockRuns is how many times a lock through proxy A ends streams on C.
const haLockRuns = 3

// carol is a user of the three-proxy test alone: the lock runs lock her,
// while alice carries the load.
var carol = gatewaytest.User{Name: "carol", Password: "carol-password-1", Traits: []string{"groups=dev"}}

// haEnv is three proxies on one PostgreSQL behind HAProxy, and one worker.
type haEnv struct {
	*gatewaytest.Env
	pg  *postgres.Server
	db  string // the database URL
	lb  *haproxy.LB
	dir string
}

func startHA(t *testing.T) *haEnv {
	t.Helper()
	haproxy.Need(t)
	pg := postgres.Start(t)
	db := pg.Database(t)
	bin := gateway(t).Bin
	dir, err := os.MkdirTemp("", "limen-e2e-ha-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// HAProxy reaches the proxies from haLBSource and says who each client
	// is in a PROXY protocol v2 header; clients, the worker and the admin
	// commands that dial a proxy directly come from 127.0.0.1, without one.
	e, err := gatewaytest.StartWith(ctx, clustertest.Cluster(t), dir, os.Stderr, gatewaytest.Options{
		Bin: bin, DatabaseURL: db, Proxies: len(haBackends), ProxyArgs: []string{"--proxy-protocol-from", haLBSource},
	})
	// Cleanups run last first: HAProxy stops, then the proxies, then
	// PostgreSQL (registered before).
	t.Cleanup(func() {
		if e != nil {
			e.Stop()
		}
		if t.Failed() {
			t.Logf("logs of the proxies, the worker and HAProxy kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	if err != nil {
		t.Fatalf("start three proxies on PostgreSQL: %v", err)
	}
	var backends []haproxy.Backend
	for i, a := range e.ProxyAddrs() {
		backends = append(backends, haproxy.Backend{Name: haBackends[i], Addr: a})
	}
	lb := haproxy.Start(t, backends, haproxy.SendProxyFrom(haLBSource))
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(lb.Dir + "/haproxy.log"); err == nil {
				_ = os.WriteFile(dir+"/haproxy.log", b, 0o644)
			}
		}
	})
	for _, n := range haBackends {
		if err := lb.WaitStatus(ctx, n, "UP", 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.AddUser(ctx, carol); err != nil {
		t.Fatal(err)
	}
	// The admin has a profile at each proxy, and every admin command here
	// names its proxy.
	for _, a := range e.ProxyAddrs()[1:] {
		if _, err := e.LoginAt(ctx, gatewaytest.Users[0], a); err != nil {
			t.Fatal(err)
		}
	}
	return &haEnv{Env: e, pg: pg, db: db, lb: lb, dir: dir}
}

// haLBSource is the loopback address HAProxy connects to the proxies from.
const haLBSource = "127.0.0.2"

// sessionsOn lists the sessions proxy i relays itself: every proxy lists
// every proxy's sessions, the others' with Proxy set.
func (h *haEnv) sessionsOn(t *testing.T, i int) []sessions.Info {
	t.Helper()
	out := adminOn(t, h.Env, "sessions", "ls", "--json", "--proxy", h.ProxyAddrs()[i])
	var list []sessions.Info
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("limen sessions ls --json: %v: %q", err, out)
	}
	return slices.DeleteFunc(list, func(s sessions.Info) bool { return s.Proxy != "" })
}

// relaying returns the proxy that relays a live session of user of kind,
// waiting up to 15 s for one.
func (h *haEnv) relaying(t *testing.T, user string, kind sessions.Kind) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		for i := range haBackends {
			for _, s := range h.sessionsOn(t, i) {
				if s.Live() && s.Principal.Name == user && s.Kind == kind {
					return i
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no proxy relays a live %s of %s", kind, user)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// haClients are n client-go clients of kubeconfig, each with its own
// connection and no client-side rate limit (load.NewClients).
func haClients(t *testing.T, kubeconfig string, n int) []*load.Client {
	t.Helper()
	cs, err := load.NewClients(kubeconfig, n)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// clientsOn returns the load's clients whose connection goes to proxy i.
func (h *haEnv) clientsOn(t *testing.T, l *load.Run, i int) []*load.Client {
	t.Helper()
	var on []*load.Client
	for _, c := range l.Clients() {
		srv, err := h.lb.ServerOf(context.Background(), c.Local())
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSuffix(srv, "-backup") == haBackends[i] {
			on = append(on, c)
		}
	}
	return on
}

// restart starts proxy i again and waits until the worker's tunnel and
// HAProxy's checks are back.
func (h *haEnv) restart(t *testing.T, i int) time.Duration {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	n := h.Tunnels(i)
	if err := h.StartProxyN(ctx, i); err != nil {
		t.Fatal(err)
	}
	if err := h.WaitTunnel(ctx, i, n+1); err != nil {
		t.Fatal(err)
	}
	if err := h.lb.WaitStatus(ctx, haBackends[i], "UP", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// auditEvents searches the shared trail with limen audit search
// --database-url.
func (h *haEnv) auditEvents(t *testing.T, args ...string) []audit.Event {
	t.Helper()
	out, err := h.Limen(context.Background(), "", "", append([]string{"audit", "search", "--database-url", h.db, "--json", "--limit", "100000"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	var evs []audit.Event
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev audit.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("limen audit search: %v: %q", err, sc.Text())
		}
		evs = append(evs, ev)
	}
	return evs
}

// TestHAThreeProxies runs three proxies on one PostgreSQL behind HAProxy
// in TCP mode, one worker holding a tunnel to each, and alice's load
// through the balancer (client-go every 50 ms, a watch, an exec printing a
// line every 100 ms, a port-forward moving data), and then:
//
//   - locks carol through proxy A while her exec and watch run through
//     proxy C: both end within a second, session.end naming the lock;
//   - kills one proxy (kill -9): what was in flight on it fails with an
//     error, never a truncation; every request from 5 s on succeeds; the
//     watch comes back;
//   - restarts PostgreSQL: requests are refused (503) while it is down,
//     none succeeds unaudited, service comes back by itself;
//   - stops one proxy with SIGTERM, as a rolling upgrade does: no request
//     fails;
//   - every request alice saw succeed is in the shared audit trail exactly
//     once.
func TestHAThreeProxies(t *testing.T) {
	began := time.Now()
	h := startHA(t)
	ctx := context.Background()
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "ticker", []string{"sleep", "infinity"}, false)
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Close() })
	go load.ServeEcho(echo)
	tick, stopTick := context.WithCancel(ctx)
	defer stopTick()
	go load.TickConfigMap(tick, clustertest.Cluster(t).Client, ns, "ha-tick")

	alice := gatewaytest.Users[1]
	kcLB, err := h.LoginAt(ctx, alice, h.lb.Addr)
	if err != nil {
		t.Fatal(err)
	}
	addrs := h.ProxyAddrs()
	kcC, err := h.LoginAt(ctx, carol, addrs[2])
	if err != nil {
		t.Fatal(err)
	}
	// The load's GETs name configmaps ha-0, ha-1, …: none exists (ha-tick
	// is no number).
	l := load.Start(ctx, load.Config{Namespace: ns, Clients: haClients(t, kcLB, haLoadClients),
		Kubectl: clustertest.Kubectl(t, ""), Kubeconfig: kcLB,
		Pod: "ticker", EchoPort: echo.Addr().(*net.TCPAddr).Port, Prefix: "ha-"})
	stopped := false
	defer func() {
		if !stopped {
			l.Stop()
		}
	}()
	time.Sleep(2 * time.Second) // every part of the load under way

	var fig haFigures
	t.Run("lock through A ends streams on C", func(t *testing.T) { fig.lock = h.lockFanOut(t, ns, kcC) })
	t.Run("kill -9 one proxy", func(t *testing.T) { h.killOne(t, l, &fig) })
	t.Run("PostgreSQL restart", func(t *testing.T) { h.restartPostgres(t, l, &fig) })
	t.Run("SIGTERM one proxy", func(t *testing.T) { h.termOne(t, l, &fig) })

	l.Stop()
	stopped = true
	stopTick()
	t.Run("audit trail holds every success exactly once", func(t *testing.T) { h.checkAudit(t, l, began, &fig) })
	t.Run("GET through each proxy", func(t *testing.T) { fig.perProxy = h.perProxyGET(t, kcLB, ns) })
	fig.log(t, l.Snapshot(), time.Since(began))
}

// haFigures are what the test measured, printed in one block at the end.
type haFigures struct {
	lock                       []time.Duration
	killed                     string
	killClients, killInFlight  int
	killInFlightFailed         int
	killWatch                  time.Duration
	killLost                   int
	killRecover                time.Duration
	killStreams                string
	restartKilled              time.Duration
	pgDown                     time.Duration
	pg503, pgOther, pgOK       int
	pgBack                     time.Duration
	termed                     string
	termFailed, termReqs       int
	termClients                int
	termTook                   time.Duration
	auditOK, auditNoOutcome    int
	perProxy                   []time.Duration
	requests, failed, failures int
}

func (f *haFigures) log(t *testing.T, l load.Snapshot, took time.Duration) {
	s := slices.Sorted(slices.Values(f.lock))
	var b strings.Builder
	fmt.Fprintf(&b, "three proxies on PostgreSQL behind HAProxy (TCP), one worker; load through HAProxy; test took %s\n", took.Round(time.Second))
	if len(s) > 0 {
		fmt.Fprintf(&b, "  lock via A -> exec+watch on C ended (incl. the limen lock process): %d runs, p50 %s, max %s\n",
			len(s), s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "  kill -9 proxy %s (%d of %d client-go connections on it): %d requests failed (%d of %d in flight on it at the kill); its clients answered again %s after the kill; a new watch had its first event in %s; streams: %s; back in rotation %s after restart\n",
		f.killed, f.killClients, haLoadClients, f.killLost, f.killInFlightFailed, f.killInFlight, f.killRecover.Round(time.Millisecond), f.killWatch.Round(time.Millisecond), f.killStreams, f.restartKilled.Round(time.Millisecond))
	fmt.Fprintf(&b, "  PostgreSQL down %s: %d requests answered 503, %d failed otherwise, %d succeeded; service back %s after it started\n",
		f.pgDown.Round(time.Millisecond), f.pg503, f.pgOther, f.pgOK, f.pgBack.Round(time.Millisecond))
	fmt.Fprintf(&b, "  SIGTERM proxy %s (%d client-go connections on it; drained in %s): %d of %d requests failed\n",
		f.termed, f.termClients, f.termTook.Round(time.Millisecond), f.termFailed, f.termReqs)
	fmt.Fprintf(&b, "  audit: %d successes each stored exactly once (kube.sent), %d of them without an outcome (kube.request)\n", f.auditOK, f.auditNoOutcome)
	if len(f.perProxy) == len(haBackends) {
		fmt.Fprintf(&b, "  GET p50 straight to A %s, B %s, C %s (the worker enrolled with A and learned B and C)\n",
			f.perProxy[0].Round(10*time.Microsecond), f.perProxy[1].Round(10*time.Microsecond), f.perProxy[2].Round(10*time.Microsecond))
	}
	fmt.Fprintf(&b, "  load: %d requests, %d failed; watch ended %d times, back after %v; exec ended %d times, %d lines, %d gaps; port-forward ended %d times, %d rounds of %d KiB, %d mismatches",
		len(l.Requests), f.failed, len(l.WatchEnds), roundAll(l.WatchBack), len(l.ExecEnds), l.ExecLines, len(l.ExecGaps), len(l.PFEnds), l.PFRounds, load.DefaultChunk>>10, len(l.PFMismatch))
	t.Logf("HA figures\n%s", b.String())
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// lockFanOut locks carol through proxy A while her exec and watch run
// through proxy C, and returns how long after the lock call both ended.
func (h *haEnv) lockFanOut(t *testing.T, ns, kcC string) []time.Duration {
	a := h.ProxyAddrs()[0]
	var lat []time.Duration
	t.Cleanup(func() { _, _ = h.Limen(context.Background(), "admin", "", "unlock", "carol", "--proxy", a) })
	for run := range haLockRuns {
		waitUnlocked(t, kcC, ns)
		_, execDone := openStream(t, kcC, "-n", ns, "exec", "ticker", "--", "sh", "-c", "while :; do echo x; sleep 0.1; done")
		_, watchDone := openStream(t, kcC, "-n", ns, "get", "configmaps", "-w")
		ids := h.waitCarolLive(t)
		reason := fmt.Sprintf("ha incident %d", run)
		start := time.Now()
		adminOn(t, h.Env, "lock", "carol", "--proxy", a, "--reason", reason)
		for _, done := range []<-chan error{execDone, watchDone} {
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("run %d: carol's stream on proxy C still open 5s after the lock through A", run)
			}
		}
		lat = append(lat, time.Since(start))
		for kind, id := range ids {
			end := h.waitSessionEnd(t, id)
			if end.Session.EndReason != audit.EndLocked || !strings.Contains(end.Session.EndDetail, reason) {
				t.Fatalf("run %d: %s session.end says %q by the %s (%q); want locked with %q",
					run, kind, end.Session.EndReason, end.Session.EndHop, end.Session.EndDetail, reason)
			}
		}
		adminOn(t, h.Env, "unlock", "carol", "--proxy", a)
	}
	withinASecond(t, "lock through A → exec and watch on C end", lat)
	return lat
}

// waitUnlocked waits until carol's requests through C pass again (the
// unlock reaches C through the database's notification).
func waitUnlocked(t *testing.T, kc, ns string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, stderr, code := kubectl(t, kc, "", "-n", ns, "get", "configmaps", "ha-tick")
		if code == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("carol still refused through C 10s after the unlock: %s", stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitCarolLive waits until proxy C lists carol's exec and watch as its
// own live sessions, and returns their ids by kind.
func (h *haEnv) waitCarolLive(t *testing.T) map[sessions.Kind]string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ids := map[sessions.Kind]string{}
		for _, i := range h.sessionsOn(t, 2) {
			if i.Live() && i.Principal.Name == "carol" && (i.Kind == sessions.KindExec || i.Kind == sessions.KindWatch) {
				ids[i.Kind] = i.ID
			}
		}
		if len(ids) == 2 {
			return ids
		}
		if time.Now().After(deadline) {
			t.Fatalf("carol's exec and watch not both listed live within 15s: %v", ids)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (h *haEnv) waitSessionEnd(t *testing.T, id string) audit.Event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, ev := range h.auditEvents(t, "--type", string(audit.TypeSessionEnd), "--user", "carol", "--since", "5m") {
			if ev.SessionID == id && ev.Session != nil {
				return ev
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session.end for session %s in the shared trail within 10s", id)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// killOne kills the proxy that relays alice's exec with SIGKILL and
// judges the next 7 s.
func (h *haEnv) killOne(t *testing.T, l *load.Run, f *haFigures) {
	victim := h.relaying(t, "alice", sessions.KindExec)
	f.killed = haBackends[victim]
	s := l.Snapshot()
	execEnds, watchEnds, pfEnds := len(s.ExecEnds), len(s.WatchEnds), len(s.PFEnds)
	// Kill it while a request is under way on it, if a client's connection
	// goes there.
	on := h.clientsOn(t, l, victim)
	f.killClients = len(on)
	onVictim := map[int]bool{}
	for i, c := range l.Clients() {
		onVictim[i] = slices.Contains(on, c)
	}
	waitInFlight(on)
	kill := time.Now()
	h.KillProxyN(victim)
	time.Sleep(7 * time.Second)
	reqs := l.Requests(kill.Add(-5*time.Second), kill.Add(7*time.Second))
	// Recovered: each client that was on the victim has had an answer
	// through another proxy.
	back := map[int]time.Duration{}
	for _, r := range reqs {
		if i := r.Client; onVictim[i] && r.OK && r.Start.After(kill) {
			if d, ok := back[i]; !ok || r.End.Sub(kill) < d {
				back[i] = r.End.Sub(kill)
			}
		}
	}
	for i, c := range l.Clients() {
		if slices.Contains(on, c) {
			d, ok := back[i]
			if !ok {
				t.Errorf("client %d, on the killed proxy, had no answer within 7s", i)
			}
			f.killRecover = max(f.killRecover, d)
		}
	}
	for _, r := range reqs {
		if r.Start.Before(kill) && r.End.After(kill) && onVictim[r.Client] {
			// Answered whole before the kill reached it, or failed: both
			// fine; the decoder would fail a truncated answer.
			f.killInFlight++
			if !r.OK {
				f.killInFlightFailed++
			}
		}
		if r.OK {
			continue
		}
		if r.End.After(kill) {
			f.killLost++
		}
		if r.Start.After(kill.Add(5 * time.Second)) {
			t.Errorf("request %d sent %s after the kill failed: %s", r.Seq, r.Start.Sub(kill).Round(time.Millisecond), r.Err)
		}
	}
	s = l.Snapshot()
	execEnded := len(s.ExecEnds) - execEnds
	f.killStreams = fmt.Sprintf("exec ended %d, watch ended %d, port-forward ended %d", execEnded, len(s.WatchEnds)-watchEnds, len(s.PFEnds)-pfEnds)
	if !s.WatchUp {
		t.Errorf("the load's watch is not re-established 7s after the kill")
	}
	// Whether or not the load's watch was on the victim: a new watch
	// through the balancer opens and carries events.
	f.killWatch = h.newWatch(t, l)
	if execEnded == 0 {
		t.Errorf("the exec relayed by the killed proxy did not end")
	}
	load.CheckStreams(t, l.Snapshot())
	f.restartKilled = h.restart(t, victim)
}

// newWatch opens a watch on a new client through the balancer and returns
// how long until its first event.
func (h *haEnv) newWatch(t *testing.T, l *load.Run) time.Duration {
	t.Helper()
	c := haClients(t, l.Config().Kubeconfig, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	w, err := c.CoreV1().ConfigMaps(l.Config().Namespace).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("a new watch through the balancer after the kill: %v", err)
		return 0
	}
	defer w.Stop()
	select {
	case _, ok := <-w.ResultChan():
		if !ok {
			t.Errorf("a new watch through the balancer after the kill ended before its first event")
		}
	case <-ctx.Done():
		t.Errorf("a new watch through the balancer after the kill carried no event within 5s")
	}
	return time.Since(start)
}

// waitInFlight returns once one of clients has a request under way, or
// after 3 s.
func waitInFlight(clients []*load.Client) {
	for wait := time.Now().Add(3 * time.Second); len(clients) > 0 && time.Now().Before(wait); {
		if slices.ContainsFunc(clients, func(c *load.Client) bool { return c.InFlight() > 0 }) {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// restartPostgres stops PostgreSQL for 3 s during the load: from the
// stop's start to the start's end, every request fails 503 or succeeds
// (with its record stored, checkAudit); between the server being down and
// its start beginning, none succeeds.
func (h *haEnv) restartPostgres(t *testing.T, l *load.Run, f *haFigures) {
	stopping := time.Now()
	h.pg.Stop()
	down := time.Now()
	time.Sleep(3 * time.Second)
	up := time.Now()
	if err := h.pg.Start(); err != nil {
		t.Fatalf("start PostgreSQL again: %v", err)
	}
	started := time.Now()
	f.pgDown = started.Sub(stopping)
	// Back: ten requests in a row succeed.
	deadline := started.Add(30 * time.Second)
	for {
		rs := l.Requests(started, time.Now())
		run := 0
		for _, r := range rs {
			if r.OK {
				if run == 0 {
					f.pgBack = r.End.Sub(started)
				}
				run++
			} else {
				run = 0
			}
		}
		if run >= 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("service not back 30s after PostgreSQL started; last requests: %+v", rs[max(0, len(rs)-5):])
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // the requests under way are answered
	for _, r := range l.Requests(stopping, started.Add(f.pgBack)) {
		switch {
		case r.OK && r.Start.After(down) && r.End.Before(up):
			f.pgOK++
			t.Errorf("request %d succeeded while PostgreSQL was down: relayed without a durable audit record", r.Seq)
		case r.OK:
		case r.Status == 503:
			f.pg503++
		default:
			f.pgOther++
			t.Logf("request %d during the outage: %s", r.Seq, r.Err)
		}
	}
	if f.pg503 == 0 {
		t.Errorf("no request was answered 503 while PostgreSQL was down")
	}
	if f.pgOther > 0 {
		t.Errorf("%d requests failed otherwise than 503 while PostgreSQL was down", f.pgOther)
	}
}

// termOne stops the proxy that relays alice's exec with SIGTERM and
// counts the requests that failed from then until 2 s after it exited.
func (h *haEnv) termOne(t *testing.T, l *load.Run, f *haFigures) {
	victim := h.relaying(t, "alice", sessions.KindExec)
	f.termed = haBackends[victim]
	// While a request is under way on it: the drain must finish it.
	on := h.clientsOn(t, l, victim)
	f.termClients = len(on)
	waitInFlight(on)
	start := time.Now()
	if !h.StopProxyN(victim, 30*time.Second) {
		t.Errorf("proxy %s did not exit within 30s of SIGTERM", f.termed)
	}
	f.termTook = time.Since(start)
	time.Sleep(2 * time.Second)
	reqs := l.Requests(start, time.Now().Add(-time.Second))
	f.termReqs = len(reqs)
	for _, r := range reqs {
		if !r.OK {
			f.termFailed++
			t.Errorf("request %d, sent %s after SIGTERM, failed: %s", r.Seq, r.Start.Sub(start).Round(time.Millisecond), r.Err)
		}
	}
	load.CheckStreams(t, l.Snapshot())
	h.restart(t, victim)
}

// checkAudit matches alice's requests with the shared trail
// (load.CheckAudit): each that she saw succeed has exactly one record
// (kube.sent, durable before the response was relayed), and no request has
// two; each record names the client behind HAProxy.
func (h *haEnv) checkAudit(t *testing.T, l *load.Run, began time.Time, f *haFigures) {
	since := began.UTC().Format(time.RFC3339)
	prefix := l.AuditPrefix()
	var evs []audit.Event
	for _, typ := range []audit.Type{audit.TypeKubeSent, audit.TypeKubeRequest} {
		for _, ev := range h.auditEvents(t, "--type", string(typ), "--user", "alice", "--since", since) {
			if ev.Kube == nil || !strings.HasPrefix(ev.Kube.Path, prefix) {
				continue
			}
			// The client, from HAProxy's PROXY header, not HAProxy.
			host := ev.ClientAddr
			if h, _, err := net.SplitHostPort(host); err == nil {
				host = h
			}
			if host != "127.0.0.1" {
				t.Errorf("%s of %s names client %q, want 127.0.0.1 (the client behind HAProxy, not HAProxy at %s)", typ, ev.Kube.Path, ev.ClientAddr, haLBSource)
			}
			evs = append(evs, ev)
		}
	}
	a := load.CheckAudit(t, l.Snapshot().Requests, evs, prefix)
	f.requests, f.failed, f.auditOK, f.auditNoOutcome = a.Requests, a.Failed, a.OK, a.NoOutcome
}

// perProxyGET measures alice's GET p50 straight to each proxy.
func (h *haEnv) perProxyGET(t *testing.T, kcLB, ns string) []time.Duration {
	var out []time.Duration
	for _, a := range h.ProxyAddrs() {
		kc := retargetServer(t, kcLB, h.lb.Addr, a)
		c := haClients(t, kc, 1)[0].Clientset
		var lat []time.Duration
		for i := range 41 {
			start := time.Now()
			_, err := c.CoreV1().ConfigMaps(ns).Get(context.Background(), "ha-tick", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("GET through %s: %v", a, err)
			}
			if i > 0 { // the first opens the connection
				lat = append(lat, time.Since(start))
			}
		}
		slices.Sort(lat)
		out = append(out, lat[len(lat)/2])
	}
	return out
}

// retargetServer writes a copy of kubeconfig whose server is to instead of
// from (the credential and the server name stay).
func retargetServer(t *testing.T, kubeconfig, from, to string) string {
	t.Helper()
	b, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "https://"+from) {
		t.Fatalf("kubeconfig %s has no server https://%s", kubeconfig, from)
	}
	p := t.TempDir() + "/kubeconfig"
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(b), "https://"+from, "https://"+to)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
