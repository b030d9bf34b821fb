package chaos

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
	"github.com/limenhq/limen/test/load"
)

// crash is one scenario: what it kills and how it brings it back, and the
// session.end reasons that tell the truth about the streams it cut.
type crash struct {
	name    string
	kill    func(t *testing.T, e *gatewaytest.Env)
	restart func(t *testing.T, e *gatewaytest.Env)
	// want is the end reason (audit.End…) and hop of each kind of stream
	// (the session's login) that was open at the kill.
	want map[string]end
	// execSays is what the exec's client must be told, if anything.
	execSays string
	// streamsEnd: the kill ends the streams (a dead worker or proxy). An
	// API server that dies ends them too; a scenario that keeps them says
	// false.
	streamsEnd bool
}

// end is a session.end's reason and hop.
type end struct{ reason, hop string }

func (e end) String() string { return e.reason + " (" + e.hop + ")" }

// chaosClients is how many client-go clients carry the GETs.
const chaosClients = 3

// run is one scenario under way: the load, its namespace and the times.
type run struct {
	e       *gatewaytest.Env
	load    *load.Run
	ns      string
	began   time.Time
	killed  time.Time
	revived time.Time // the restart returned
}

// startLoad starts the load of test/load against a pod of a new namespace,
// through the shared proxy and worker, and returns once every part of it
// is under way.
func startLoad(t *testing.T) *run {
	t.Helper()
	e, kc := gateway(t)
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "ticker", []string{"sleep", "infinity"}, false)
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Close() })
	go load.ServeEcho(echo)
	tick, stopTick := context.WithCancel(context.Background())
	t.Cleanup(stopTick)
	go load.TickConfigMap(tick, clustertest.Cluster(t).Client, ns, "chaos-tick")
	clients, err := load.NewClients(kc, chaosClients)
	if err != nil {
		t.Fatal(err)
	}
	r := &run{e: e, ns: ns, began: time.Now()}
	r.load = load.Start(context.Background(), load.Config{Namespace: ns, Clients: clients,
		Kubectl: clustertest.Kubectl(t, ""), Kubeconfig: kc, Pod: "ticker", EchoPort: echo.Addr().(*net.TCPAddr).Port, Prefix: "chaos-"})
	t.Cleanup(r.load.Stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := r.load.Snapshot()
		if len(s.Execs) > 0 && s.Execs[len(s.Execs)-1].Last >= 3 && s.WatchUp && s.WatchSeen > 0 && s.PFRounds >= 3 && okCount(s.Requests) >= 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the load did not get under way within 30s: %d execs, watch up %v (%d events), %d port-forward rounds, %d requests answered",
				len(s.Execs), s.WatchUp, s.WatchSeen, s.PFRounds, okCount(s.Requests))
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	return r
}

func okCount(rs []load.Request) int {
	n := 0
	for _, r := range rs {
		if r.OK {
			n++
		}
	}
	return n
}

// seen is what the clients saw of one crash.
type seen struct {
	exec, watch, pf        *load.StreamEnd
	execAt, watchAt, pfAt  time.Duration // from the kill to the end
	reqsFailed, reqsAround int
	// back: from the restart's return to the first success of each part
	// (requests, a new exec's first line, a new watch, a port-forward
	// round); killToBack the same from the kill.
	back, killToBack map[string]time.Duration
	ends             map[string]end // by login, the streams open at the kill
	recordings       []load.RecordingMatch
}

// crashUnderLoad runs sc: the load, the kill, what the clients see, the
// restart, service coming back, and then the invariants.
func crashUnderLoad(t *testing.T, sc crash) {
	r := startLoad(t)
	before := r.load.Snapshot()
	var sn seen
	r.killed = time.Now()
	sc.kill(t, r.e)
	if sc.streamsEnd {
		sn.waitEnds(t, r, before)
		if sn.exec != nil && sc.execSays != "" && !strings.Contains(sn.exec.Err, sc.execSays) {
			t.Errorf("the exec's client was told %q at the kill: want it told %q", sn.exec.Err, sc.execSays)
		}
	}
	sc.restart(t, r.e)
	r.revived = time.Now()
	sn.waitBack(t, r)
	time.Sleep(time.Second) // the parts carry on a little
	r.load.Stop()
	after := r.load.Snapshot()
	for _, q := range after.Requests {
		if q.End.After(r.killed) && q.Start.Before(r.revived) {
			sn.reqsAround++
			if !q.OK {
				sn.reqsFailed++
			}
		}
	}
	load.CheckStreams(t, after)
	evs := r.auditEvents(t)
	load.CheckAudit(t, after.Requests, evs, r.load.AuditPrefix())
	sn.ends = r.checkEnds(t, evs, sc)
	sn.recordings = r.checkRecordings(t, evs, after)
	load.Figures(t, sc.name, sn.lines(r)...)
}

// waitEnds waits up to 15 s for the exec, the watch and the port-forward
// open at the kill to end, and keeps what their clients saw.
func (sn *seen) waitEnds(t *testing.T, r *run, before load.Snapshot) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		s := r.load.Snapshot()
		if len(s.ExecEnds) > len(before.ExecEnds) && sn.exec == nil {
			sn.exec, sn.execAt = &s.ExecEnds[len(before.ExecEnds)], s.ExecEnds[len(before.ExecEnds)].At.Sub(r.killed)
		}
		if len(s.WatchEnds) > len(before.WatchEnds) && sn.watch == nil {
			sn.watch, sn.watchAt = &s.WatchEnds[len(before.WatchEnds)], s.WatchEnds[len(before.WatchEnds)].At.Sub(r.killed)
		}
		if len(s.PFEnds) > len(before.PFEnds) && sn.pf == nil {
			sn.pf, sn.pfAt = &s.PFEnds[len(before.PFEnds)], s.PFEnds[len(before.PFEnds)].At.Sub(r.killed)
		}
		if sn.exec != nil && sn.watch != nil && sn.pf != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("15s after the kill, not every stream has ended: exec %v, watch %v, port-forward %v", sn.exec != nil, sn.watch != nil, sn.pf != nil)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitBack waits up to 60 s after the restart for each part of the load to
// succeed again, and measures when each did.
func (sn *seen) waitBack(t *testing.T, r *run) {
	t.Helper()
	sn.back, sn.killToBack = map[string]time.Duration{}, map[string]time.Duration{}
	deadline := r.revived.Add(60 * time.Second)
	for {
		s := r.load.Snapshot()
		at := map[string]time.Time{}
		for _, q := range s.Requests {
			if q.OK && q.Start.After(r.killed) && (at["requests"].IsZero() || q.End.Before(at["requests"])) {
				at["requests"] = q.End
			}
		}
		for _, x := range s.Execs {
			if !x.FirstLine.IsZero() && x.Start.After(r.killed) {
				at["exec"] = x.FirstLine
				break
			}
		}
		for _, w := range s.WatchStart {
			if w.After(r.killed) {
				at["watch"] = w
				break
			}
		}
		for _, p := range s.PFStarts {
			if p.After(r.killed) {
				at["port-forward"] = p
				break
			}
		}
		if len(at) == 4 {
			for k, v := range at {
				sn.back[k], sn.killToBack[k] = max(0, v.Sub(r.revived)), v.Sub(r.killed)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("60s after the restart not every part of the load is back: %v", slices.Collect(func(yield func(string) bool) {
				for k := range at {
					if !yield(k) {
						return
					}
				}
			}))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// auditEvents waits until every session of alice since the scenario began
// has its session.end (up to 30 s), and returns her events of the types the
// checks read.
func (r *run) auditEvents(t *testing.T) []audit.Event {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var evs []audit.Event
		for _, typ := range []audit.Type{audit.TypeKubeSent, audit.TypeKubeRequest, audit.TypeSessionStart, audit.TypeSessionEnd} {
			evs = append(evs, r.search(t, typ)...)
		}
		_, open := load.SessionEnds(evs)
		if len(open) == 0 || time.Now().After(deadline) {
			return evs
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (r *run) search(t *testing.T, typ audit.Type) []audit.Event {
	t.Helper()
	ctx := context.Background()
	st, err := audit.Open(ctx, audit.Path(r.e.ProxyDataDir()), audit.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("open the proxy's audit store: %v", err)
	}
	defer st.Close()
	evs, err := st.Search(ctx, audit.Query{User: "alice", Type: typ, Since: r.began, Limit: 100000})
	if err != nil {
		t.Fatalf("search the proxy's audit store: %v", err)
	}
	return evs
}

// checkEnds checks that each session has one session.end, that each stream
// open at the kill ended with the reason sc names, and returns those
// reasons by login.
func (r *run) checkEnds(t *testing.T, evs []audit.Event, sc crash) map[string]end {
	t.Helper()
	ends := load.CheckOneEnd(t, evs)
	got := map[string]end{}
	for _, ev := range evs {
		if ev.Type != audit.TypeSessionStart || !ev.Time.Before(r.killed) {
			continue
		}
		e, ok := ends[ev.SessionID]
		if !ok || e.Time.Before(r.killed) {
			continue // reported by CheckOneEnd, or over before the kill
		}
		login := ev.Session.Login
		g := end{e.Session.EndReason, e.Session.EndHop}
		got[login] = g
		if w, ok := sc.want[login]; ok && g != w {
			t.Errorf("the %s open at the kill (session %s) ended %s, detail %q: want %s", login, ev.SessionID, g, e.Session.EndDetail, w)
		}
	}
	for login := range sc.want {
		if _, ok := got[login]; !ok {
			t.Errorf("no %s was open at the kill", login)
		}
	}
	return got
}

// checkRecordings fetches the recording of each of alice's execs from the
// proxy's store (uploads are asynchronous; a recording cut by a crash comes
// when the worker is back) and checks each holds what its client received.
func (r *run) checkRecordings(t *testing.T, evs []audit.Event, s load.Snapshot) []load.RecordingMatch {
	t.Helper()
	recs := map[string][]byte{}
	for _, ev := range evs {
		if ev.Type == audit.TypeSessionStart && ev.Session.Login == "exec" {
			if b := r.fetchRecording(t, ev.SessionID); b != nil {
				recs[ev.SessionID] = b
			}
		}
	}
	return load.CheckRecordings(t, s, recs)
}

func (r *run) fetchRecording(t *testing.T, id string) []byte {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := recstore.OpenExisting(recstore.Path(r.e.ProxyDataDir()))
		if err == nil {
			rc, _, err := st.Open(id)
			if err == nil {
				b, err := io.ReadAll(rc)
				rc.Close()
				if err != nil {
					t.Errorf("read recording %s: %v", id, err)
				}
				return b
			}
		}
		if time.Now().After(deadline) {
			// An exec whose client received nothing may have none:
			// CheckRecordings judges.
			t.Logf("recording %s not in the proxy's store within 30s: %v", id, err)
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// lines are the scenario's figures, for the report.
func (sn *seen) lines(r *run) []string {
	client := func(what string, e *load.StreamEnd, at time.Duration) string {
		if e == nil {
			return what + ": did not end"
		}
		return fmt.Sprintf("%s ended %s after the kill: %s", what, at.Round(time.Millisecond), said(*e))
	}
	var back []string
	for _, k := range []string{"requests", "exec", "watch", "port-forward"} {
		back = append(back, fmt.Sprintf("%s %s (%s after the kill)", k, sn.back[k].Round(time.Millisecond), sn.killToBack[k].Round(time.Millisecond)))
	}
	var ends []string
	for _, k := range []string{"exec", "watch", "portforward"} {
		if e, ok := sn.ends[k]; ok {
			ends = append(ends, k+" "+e.String())
		}
	}
	var recs []string
	for _, m := range sn.recordings {
		recs = append(recs, fmt.Sprintf("line-%d of the client's line-%d", m.RecordedLast, m.ClientLast))
	}
	return []string{
		"client saw: " + client("exec", sn.exec, sn.execAt) + "; " + client("watch", sn.watch, sn.watchAt) + "; " + client("port-forward", sn.pf, sn.pfAt),
		fmt.Sprintf("requests: %d of %d answered between the kill and the restart's return failed; the restart took %s", sn.reqsFailed, sn.reqsAround, r.revived.Sub(r.killed).Round(time.Millisecond)),
		"service back after the restart: " + strings.Join(back, ", "),
		"session.end of the streams open at the kill: " + strings.Join(ends, ", "),
		"recordings hold (in order, per exec): " + strings.Join(recs, ", "),
	}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// said is what a client said at a stream's end: kubectl's exit status and
// the last line it printed (klog's prefix cut), or the client-go error.
func said(e load.StreamEnd) string {
	lines := strings.Split(strings.TrimSpace(e.Err), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if _, rest, ok := strings.Cut(last, "] "); ok && strings.HasPrefix(last, "E") {
		last = rest // E1202 17:30:11.024447   32688 v2.go:167] ...
	}
	if e.ExitCode != 0 && len(lines) > 1 {
		last = fmt.Sprintf("exit %d, %s", e.ExitCode, last)
	}
	if last == "" || last == "<nil>" {
		last = "(no error: the stream just ended)"
	}
	return fmt.Sprintf("%q", clip(last, 200))
}
