// Package scale measures the figures of docs/SCALE.md (issue 28, item 7):
// what a `limen proxy` on PostgreSQL costs the database per request, per
// stream and per enrolled cluster, how fast a NOTIFY and a lock reach
// another proxy, and what a worker tunnel and an idle watch cost a proxy
// in memory. It runs only with LIMEN_SCALE=1 (make scale), never in make
// test: it takes minutes and its figures depend on the machine.
//
// What runs: a real PostgreSQL (test/postgres), two real `limen proxy`
// processes on it sharing one CA directory (limen proxy keys init), a real
// `limen worker` holding a tunnel to each (--peer-address), and the real
// tunnel client of gateway/tunnel for the many extra tunnels. The one
// stand-in is the Kubernetes API server: an HTTPS handler that answers the
// worker with one small ConfigMap and holds watches open. It is named so
// because nothing measured here is the API server's work (bench/RESULTS.md
// measures Limen in front of the real one), and it keeps the figures free
// of an API server's own cost on a shared 2-core machine.
package scale

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/limenhq/limen/bench"
	"github.com/limenhq/limen/gateway/adminapi"
	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/profile"
	"github.com/limenhq/limen/gateway/tunnel"
	pgtest "github.com/limenhq/limen/test/postgres"
)

// Env is how many of each thing the run makes; the defaults take about
// three minutes on 2 shared cores.
func count(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

const cluster = "demo"

func TestScaleFigures(t *testing.T) {
	if os.Getenv("LIMEN_SCALE") != "1" {
		t.Skip("LIMEN_SCALE=1 runs the capacity figures of docs/SCALE.md (make scale)")
	}
	requests := count("LIMEN_SCALE_REQUESTS", 2000)
	watches := count("LIMEN_SCALE_WATCHES", 300)
	tunnels := count("LIMEN_SCALE_TUNNELS", 1000)
	notifies := count("LIMEN_SCALE_NOTIFIES", 2000)
	lockRounds := count("LIMEN_SCALE_LOCKS", 30)
	userCount := count("LIMEN_SCALE_USERS", 200)

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	start := time.Now()
	loadStart := bench.LoadAvg()
	dir := t.TempDir()
	bin := filepath.Join(dir, "limen")
	build := exec.Command("go", "build", "-o", bin, "./cmd/limen")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	commit, _ := exec.Command("git", "-C", repoRoot(t), "rev-parse", "HEAD").Output()

	srv := pgtest.Start(t)
	dbURL := srv.Database(t)
	caDir := filepath.Join(dir, "ca")
	run(t, bin, nil, "", "proxy", "keys", "init", "--ca-dir", caDir)

	kube := standIn(t)
	kubeCA := filepath.Join(dir, "kube-ca.pem")
	if err := os.WriteFile(kubeCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: kube.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "kube-token")
	if err := os.WriteFile(tokenFile, []byte("stand-in-token"), 0o600); err != nil {
		t.Fatal(err)
	}

	a := startProxy(t, bin, dir, "a", dbURL, caDir)
	b := startProxy(t, bin, dir, "b", dbURL, caDir)
	env := []string{"LIMEN_DATABASE_URL=" + dbURL}
	run(t, bin, env, "admin-password-1\n", "users", "add", "admin", "--local", "--data-dir", a.dir, "--trait", "groups=admins", "--password-stdin")
	run(t, bin, env, "alice-password-1\n", "users", "add", "alice", "--local", "--data-dir", a.dir, "--trait", "groups=dev", "--password-stdin")
	admin := login(t, bin, dir, "admin", "admin-password-1", a)
	alice := login(t, bin, dir, "alice", "alice-password-1", a).HTTP
	aliceB := login(t, bin, dir, "alice", "alice-password-1", b).HTTP
	alice.Timeout, aliceB.Timeout = 0, 0

	tok, err := admin.CreateToken(ctx, authapi.TokenRequest{Cluster: cluster, TTL: "10m"})
	if err != nil {
		t.Fatal(err)
	}
	worker := spawn(t, dir, "worker", exec.Command(bin, "worker", "--proxy", a.addr, "--kube-cluster", cluster,
		"--data-dir", filepath.Join(dir, "worker"), "--kube-api-server", kube.URL, "--kube-ca-file", kubeCA,
		"--kube-token-file", tokenFile, "--kube-cluster-label", "env=dev", "--kube-impersonation", "legacy",
		"--shutdown-handover", "0", "--join-token", tok.Token))
	_ = worker
	get := func(c *http.Client, p *proxyProc) (int, error) {
		resp, err := c.Get("https://" + p.addr + "/k8s/" + cluster + "/api/v1/namespaces/default/configmaps/scale")
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	waitFor(t, "the worker to serve through both proxies", 60*time.Second, func() bool {
		ca, _ := get(alice, a)
		cb, _ := get(aliceB, b)
		return ca == http.StatusOK && cb == http.StatusOK
	})

	pg, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(context.Background())
	figs := &figures{t: t}

	// The database's background: two proxies and one worker, idle.
	idle := time.Duration(count("LIMEN_SCALE_IDLE_SECONDS", 20)) * time.Second
	checkpoint(t, ctx, pg)
	before := snap(t, ctx, pg)
	time.Sleep(idle)
	bg := snap(t, ctx, pg).sub(before).per(idle.Seconds())
	figs.add("idle, 2 proxies and 1 worker: write transactions/s", "%.1f", bg.xacts)
	figs.add("idle, 2 proxies and 1 worker: WAL bytes/s", "%.0f", bg.wal)

	// Requests: GET one ConfigMap through proxy A at concurrency 1, then 16.
	for _, conc := range []int{1, 16} {
		n := requests
		before := snap(t, ctx, pg)
		cpu0, _ := bench.CPUTime(a.cmd.Process.Pid)
		t0 := time.Now()
		var next atomic.Int64
		var failed atomic.Int64
		var wg sync.WaitGroup
		for range conc {
			wg.Go(func() {
				for next.Add(1) <= int64(n) {
					if code, err := get(alice, a); err != nil || code != http.StatusOK {
						failed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		took := time.Since(t0)
		cpu1, _ := bench.CPUTime(a.cmd.Process.Pid)
		d := snap(t, ctx, pg).sub(before).minus(bg, time.Since(t0).Seconds())
		if failed.Load() != 0 {
			t.Fatalf("%d of %d requests failed", failed.Load(), n)
		}
		name := fmt.Sprintf("GET one ConfigMap, c=%d, %d requests", conc, n)
		figs.add(name+": requests/s", "%.0f", float64(n)/took.Seconds())
		figs.add(name+": proxy CPU ms per request", "%.3f", float64((cpu1-cpu0).Microseconds())/1000/float64(n))
		figs.add(name+": requests per proxy CPU-second", "%.0f", float64(n)/(cpu1-cpu0).Seconds())
		figs.add(name+": write transactions per request", "%.2f", d.xacts/float64(n))
		figs.add(name+": audit and session rows per request", "%.2f", d.rows/float64(n))
		figs.add(name+": WAL bytes per request", "%.0f", d.wal/float64(n))
		figs.add(name+": audit table bytes per request", "%.0f", d.audit/float64(n))
	}

	// Streams: watches opened through proxy A, held, then closed.
	{
		rss0, mem0 := rssOf(t, a), inuse(t, a)
		before := snap(t, ctx, pg)
		cpu0, _ := bench.CPUTime(a.cmd.Process.Pid)
		t0 := time.Now()
		var open []*http.Response
		for range watches {
			resp, err := alice.Get("https://" + a.addr + "/k8s/" + cluster + "/api/v1/namespaces/default/configmaps?watch=true")
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("watch: %v %v", resp, err)
			}
			open = append(open, resp)
		}
		opened := time.Since(t0)
		cpu1, _ := bench.CPUTime(a.cmd.Process.Pid)
		time.Sleep(5 * time.Second)
		rss1, mem1 := rssOf(t, a), inuse(t, a)
		for _, r := range open {
			r.Body.Close()
		}
		waitFor(t, "the watches' sessions to end", 60*time.Second, func() bool {
			return sessionsLive(t, ctx, pg) == 0
		})
		d := snap(t, ctx, pg).sub(before).minus(bg, time.Since(t0).Seconds())
		name := fmt.Sprintf("watch opened, held and closed, %d watches", watches)
		figs.add(name+": streams opened per second, one after another", "%.0f", float64(watches)/opened.Seconds())
		figs.add(name+": proxy CPU ms per stream opened", "%.2f", float64((cpu1-cpu0).Microseconds())/1000/float64(watches))
		figs.add(name+": proxy heap and stacks per idle watch (KiB)", "%.1f", float64(mem1-mem0)/1024/float64(watches))
		figs.add(name+": proxy RSS per idle watch (KiB)", "%.1f", float64(rss1-rss0)/1024/float64(watches))
		figs.add(name+": write transactions per stream", "%.2f", d.xacts/float64(watches))
		figs.add(name+": audit and session rows per stream", "%.2f", d.rows/float64(watches))
		figs.add(name+": WAL bytes per stream", "%.0f", d.wal/float64(watches))
		figs.add(name+": audit table bytes per stream", "%.0f", d.audit/float64(watches))
		figs.add(name+": sessions table bytes per stream", "%.0f", d.sessions/float64(watches))
	}

	// Tunnels: that many more clusters enrolled through proxy A, each with
	// its worker's tunnel held open by the real tunnel client.
	{
		rss0, mem0 := rssOf(t, a), inuse(t, a)
		before := snap(t, ctx, pg)
		t0 := time.Now()
		var wg sync.WaitGroup
		tctx, tcancel := context.WithCancel(ctx)
		var clients []*tunnel.Client
		for i := range tunnels {
			name := fmt.Sprintf("scale-%04d", i)
			tok, err := admin.CreateToken(ctx, authapi.TokenRequest{Cluster: name, TTL: "10m"})
			if err != nil {
				t.Fatal(err)
			}
			id, err := enroll.Enroll(ctx, enroll.Options{Proxy: a.addr, Cluster: name, Token: tok.Token, DataDir: filepath.Join(dir, "tunnels", name)})
			if err != nil {
				t.Fatal(err)
			}
			set := locks.NewSet()
			c := &tunnel.Client{Addr: id.Proxy, TLSConfig: id.TLSConfig(),
				Hello:   tunnel.Hello{Cluster: id.Cluster, WorkerID: name, Version: "scale"},
				Handler: func(_ context.Context, s net.Conn) { s.Close() },
			}
			c.OnMessage = func(ctx context.Context, m tunnel.Message) {
				if reply, err := set.HandleMessage(m); err == nil {
					go func() { _ = c.Send(ctx, reply) }()
				}
			}
			clients = append(clients, c)
			wg.Go(func() { _ = c.Run(tctx) })
		}
		enrolled := time.Since(t0)
		waitFor(t, "every tunnel to connect", 120*time.Second, func() bool {
			for _, c := range clients {
				if !c.Connected() {
					return false
				}
			}
			return true
		})
		d := snap(t, ctx, pg).sub(before).minus(bg, time.Since(t0).Seconds())
		time.Sleep(5 * time.Second)
		rss1, mem1 := rssOf(t, a), inuse(t, a)
		// And the database's rate with them all connected, idle.
		checkpoint(t, ctx, pg)
		b0 := snap(t, ctx, pg)
		w0 := time.Now()
		time.Sleep(idle)
		busy := snap(t, ctx, pg).sub(b0).per(idle.Seconds())
		t.Logf("idle with %d more tunnels: autovacuum in the window: %s", tunnels, autovacuumSince(t, ctx, pg, w0))
		name := fmt.Sprintf("%d clusters enrolled, each with its tunnel", tunnels)
		figs.add(name+": enrollment (token, enroll, connect) per cluster (ms)", "%.1f", float64(enrolled.Milliseconds())/float64(tunnels))
		figs.add(name+": proxy heap and stacks per worker tunnel (KiB)", "%.1f", float64(mem1-mem0)/1024/float64(tunnels))
		figs.add(name+": proxy RSS per worker tunnel (KiB)", "%.1f", float64(rss1-rss0)/1024/float64(tunnels))
		figs.add(name+": write transactions per enrolled cluster", "%.2f", d.xacts/float64(tunnels))
		figs.add(name+": audit and session rows per enrolled cluster", "%.2f", d.rows/float64(tunnels))
		figs.add(name+": WAL bytes per enrolled cluster", "%.0f", d.wal/float64(tunnels))
		figs.add(name+": idle, with the tunnels up: write transactions/s", "%.1f", busy.xacts)
		figs.add(name+": idle, with the tunnels up: WAL bytes/s", "%.0f", busy.wal)
		tcancel()
		wg.Wait()
	}

	// Users: added through the admin API, then each logs in once (a
	// password check, a certificate, an audit event).
	{
		before := snap(t, ctx, pg)
		var users0 int64
		if err := pg.QueryRow(ctx, "SELECT pg_total_relation_size('users')").Scan(&users0); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		for i := range userCount {
			name := fmt.Sprintf("user%05d", i)
			if err := admin.AddUser(ctx, authapi.UserRequest{Name: name, Password: "scale-password-" + name,
				Traits: map[string][]string{"groups": {"dev"}}}); err != nil {
				t.Fatal(err)
			}
		}
		added := snap(t, ctx, pg).sub(before).minus(bg, time.Since(t0).Seconds())
		var users1 int64
		if err := pg.QueryRow(ctx, "SELECT pg_total_relation_size('users')").Scan(&users1); err != nil {
			t.Fatal(err)
		}
		anon := loginClient(t, dir, a)
		cpu0, _ := bench.CPUTime(a.cmd.Process.Pid)
		l0 := snap(t, ctx, pg)
		t1 := time.Now()
		for i := range userCount {
			// Each user from an address of its own (the proxy limits login
			// attempts per address), on a connection of its own, as each
			// user's limen login is.
			name := fmt.Sprintf("user%05d", i)
			tr := anon.HTTP.Transport.(*http.Transport).Clone()
			tr.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 1, byte(i/250), byte(1+i%250))}}).DialContext
			c := *anon
			c.HTTP = &http.Client{Transport: tr}
			if _, err := c.Login(ctx, authapi.LoginRequest{User: name, Password: "scale-password-" + name, CSR: csr(t, name)}); err != nil {
				t.Fatal(err)
			}
			tr.CloseIdleConnections()
		}
		took := time.Since(t1)
		cpu1, _ := bench.CPUTime(a.cmd.Process.Pid)
		logins := snap(t, ctx, pg).sub(l0).minus(bg, time.Since(t1).Seconds())
		name := fmt.Sprintf("%d users", userCount)
		var row float64
		if err := pg.QueryRow(ctx, "SELECT avg(pg_column_size(u.*)) FROM users AS u").Scan(&row); err != nil {
			t.Fatal(err)
		}
		figs.add(name+": users table bytes per user (pages and index)", "%.0f", float64(users1-users0)/float64(userCount))
		figs.add(name+": users row bytes, average", "%.0f", row)
		figs.add(name+": audit rows per user added", "%.2f", added.rows/float64(userCount))
		figs.add(name+": WAL bytes per user added", "%.0f", added.wal/float64(userCount))
		figs.add(name+": login (password, certificate) time (ms)", "%.1f", float64(took.Microseconds())/1000/float64(userCount))
		figs.add(name+": proxy CPU ms per login", "%.1f", float64((cpu1-cpu0).Microseconds())/1000/float64(userCount))
		figs.add(name+": audit rows per login", "%.2f", logins.rows/float64(userCount))
		figs.add(name+": WAL bytes per login", "%.0f", logins.wal/float64(userCount))
		figs.add(name+": audit table bytes per login", "%.0f", logins.audit/float64(userCount))
	}

	// NOTIFY: from the commit of pg_notify on one connection to its
	// arrival on a listening one.
	{
		h := notifyLatency(t, ctx, dbURL, notifies)
		figs.add(fmt.Sprintf("NOTIFY latency, %d notifications: p50 (ms)", notifies), "%.3f", ms(h.Percentile(50)))
		figs.add(fmt.Sprintf("NOTIFY latency, %d notifications: p99 (ms)", notifies), "%.3f", ms(h.Percentile(99)))
	}

	// A lock set through proxy A's admin API, seen at proxy B: from A's
	// answer to B's first refusal of alice (polled every 2 ms), then the
	// same for the unlock.
	{
		adm := adminapi.NewClient(admin)
		var set, lifted bench.Histogram
		target := locks.Target{Kind: identity.KindUser, Name: "alice"}
		for i := range lockRounds {
			if _, err := adm.Lock(ctx, adminapi.LockRequest{Target: target, Reason: fmt.Sprintf("scale %d", i)}); err != nil {
				t.Fatal(err)
			}
			set.Record(until(t, func() bool { c, _ := get(aliceB, b); return c == http.StatusForbidden }))
			if _, err := adm.Unlock(ctx, target); err != nil {
				t.Fatal(err)
			}
			lifted.Record(until(t, func() bool { c, _ := get(aliceB, b); return c == http.StatusOK }))
		}
		figs.add(fmt.Sprintf("lock through proxy A in force at proxy B, %d rounds: p50 (ms)", lockRounds), "%.1f", ms(set.Percentile(50)))
		figs.add(fmt.Sprintf("lock through proxy A in force at proxy B, %d rounds: p99 (ms)", lockRounds), "%.1f", ms(set.Percentile(99)))
		figs.add(fmt.Sprintf("unlock through proxy A lifted at proxy B, %d rounds: p50 (ms)", lockRounds), "%.1f", ms(lifted.Percentile(50)))
		figs.add(fmt.Sprintf("unlock through proxy A lifted at proxy B, %d rounds: p99 (ms)", lockRounds), "%.1f", ms(lifted.Percentile(99)))
	}

	rows, err := pg.Query(ctx, "SELECT type, count(*) FROM audit_events GROUP BY type ORDER BY type")
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for rows.Next() {
		var typ string
		var n int64
		if err := rows.Scan(&typ, &n); err != nil {
			t.Fatal(err)
		}
		types = append(types, fmt.Sprintf("%s %d", typ, n))
	}
	rows.Close()
	t.Logf("audit events stored, by type: %s", strings.Join(types, ", "))
	var size int64
	if err := pg.QueryRow(ctx, "SELECT pg_database_size(current_database())").Scan(&size); err != nil {
		t.Fatal(err)
	}
	figs.add("database size at the end (MiB)", "%.1f", float64(size)/(1<<20))
	var version string
	_ = pg.QueryRow(ctx, "SHOW server_version").Scan(&version)
	t.Logf("run: %s, %s; commit %s; PostgreSQL %s; load average at start %s, at end %s",
		start.UTC().Format(time.RFC3339), time.Since(start).Round(time.Second), strings.TrimSpace(string(commit)), version, loadStart, bench.LoadAvg())
	figs.print()
}

// figures are the run's results, printed together at the end.
type figures struct {
	t    *testing.T
	rows []string
}

func (f *figures) add(name, format string, v float64) {
	f.rows = append(f.rows, fmt.Sprintf("| %s | "+format+" |", name, v))
	f.t.Logf("%s: "+format, name, v)
}

func (f *figures) print() {
	fmt.Println("| Figure | Value |\n|---|---:|")
	for _, r := range f.rows {
		fmt.Println(r)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// counters are the database's write counters at one moment, each exact
// when read (pg_stat_database's lag by up to 10 s, so they are not used):
// write transactions from the transaction id counter (a transaction that
// writes nothing takes no id), WAL bytes from the WAL position, and the
// audit and session rows and bytes from their tables.
type counters struct {
	xacts, rows, wal, audit, sessions float64
}

func snap(t *testing.T, ctx context.Context, pg *pgx.Conn) counters {
	t.Helper()
	var xid, wal, auditRows, auditBytes, sessRows, sessBytes int64
	err := pg.QueryRow(ctx, `SELECT txid_current(), pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
		(SELECT count(*) FROM audit_events), pg_total_relation_size('audit_events'),
		(SELECT count(*) FROM sessions), pg_total_relation_size('sessions')`).Scan(&xid, &wal, &auditRows, &auditBytes, &sessRows, &sessBytes)
	if err != nil {
		t.Fatal(err)
	}
	// txid_current takes an id itself: one per snapshot, taken off in sub.
	return counters{float64(xid), float64(auditRows + sessRows), float64(wal), float64(auditBytes), float64(sessBytes)}
}

func (c counters) sub(o counters) counters {
	return counters{c.xacts - o.xacts - 1, c.rows - o.rows, c.wal - o.wal, c.audit - o.audit, c.sessions - o.sessions}
}

func (c counters) per(s float64) counters {
	return counters{c.xacts / s, c.rows / s, c.wal / s, c.audit / s, c.sessions / s}
}

// minus takes off the background rate bg over secs (the proxies'
// heartbeats; the audit and session tables have no background).
func (c counters) minus(bg counters, secs float64) counters {
	return counters{c.xacts - bg.xacts*secs, c.rows, c.wal - bg.wal*secs, c.audit, c.sessions}
}

// checkpoint flushes the WAL and vacuums, so that an idle window counts
// neither the full-page images the first change of a page after a
// checkpoint logs nor autovacuum's work on what earlier phases wrote.
func checkpoint(t *testing.T, ctx context.Context, pg *pgx.Conn) {
	t.Helper()
	for _, q := range []string{"VACUUM", "CHECKPOINT"} {
		if _, err := pg.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// autovacuumSince names the tables autovacuum or autoanalyze worked on
// since t0: their writes (ANALYZE stores statistics in a transaction) are
// the database's own, not the proxies'.
func autovacuumSince(t *testing.T, ctx context.Context, pg *pgx.Conn, t0 time.Time) string {
	t.Helper()
	if _, err := pg.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		t.Fatal(err)
	}
	rows, err := pg.Query(ctx, `SELECT relname || CASE WHEN last_autovacuum >= $1 THEN ' vacuum' ELSE '' END
		|| CASE WHEN last_autoanalyze >= $1 THEN ' analyze' ELSE '' END
		FROM pg_stat_user_tables WHERE last_autovacuum >= $1 OR last_autoanalyze >= $1 ORDER BY relname`, t0)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// loginClient is an API client of proxy p that trusts its CA and presents
// no certificate, as limen login is before it has one.
func loginClient(t *testing.T, root string, p *proxyProc) *authapi.Client {
	t.Helper()
	prof, err := profile.Open(filepath.Join(root, "home-admin-"+p.addr), p.addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := prof.Client(nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// csr is a certificate request for a fresh P-256 key.
func csr(t *testing.T, user string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: user}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

func sessionsLive(t *testing.T, ctx context.Context, pg *pgx.Conn) int {
	var n int
	if err := pg.QueryRow(ctx, "SELECT count(*) FROM sessions WHERE end_ns = 0").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// notifyLatency sends n notifications one after another and times each
// from before its pg_notify to its arrival at the listener.
func notifyLatency(t *testing.T, ctx context.Context, url string, n int) *bench.Histogram {
	t.Helper()
	listen, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer listen.Close(context.Background())
	send, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close(context.Background())
	if _, err := listen.Exec(ctx, "LISTEN scale_probe"); err != nil {
		t.Fatal(err)
	}
	h := &bench.Histogram{}
	for i := range n {
		t0 := time.Now()
		if _, err := send.Exec(ctx, "SELECT pg_notify('scale_probe', $1)", strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := listen.WaitForNotification(wctx)
		cancel()
		if err != nil || m.Payload != strconv.Itoa(i) {
			t.Fatalf("notification %d: %v %v", i, m, err)
		}
		h.Record(time.Since(t0))
	}
	return h
}

// until polls ok every 2 ms and returns how long it took to hold.
func until(t *testing.T, ok func() bool) time.Duration {
	t.Helper()
	t0 := time.Now()
	for !ok() {
		if time.Since(t0) > 10*time.Second {
			t.Fatal("not seen within 10 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(t0)
}

func waitFor(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// standIn is the stand-in for the Kubernetes API server (see the package
// comment): one ConfigMap for a GET, a watch held open until the client
// leaves.
func standIn(t *testing.T) *httptest.Server {
	t.Helper()
	const cm = `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"scale","namespace":"default","resourceVersion":"1"},"data":{"k":"v"}}`
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") == "true" {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		io.WriteString(w, cm)
	}))
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// proxyProc is one running `limen proxy`.
type proxyProc struct {
	cmd                   *exec.Cmd
	dir, addr, fpr, debug string
}

func startProxy(t *testing.T, bin, root, name, dbURL, caDir string) *proxyProc {
	t.Helper()
	p := &proxyProc{dir: filepath.Join(root, "proxy-"+name)}
	// The peer address must be known before the port is: take a free one.
	addr := freeAddr(t)
	p.debug = freeAddr(t)
	p.cmd = exec.Command(bin, "proxy", "--listen", addr, "--data-dir", p.dir, "--database-url", dbURL, "--ca-dir", caDir,
		"--clusters", cluster, "--cluster-label", cluster+":env=dev", "--peer-address", addr,
		// Every tunnel and client of the run comes from 127.0.0.1.
		"--max-conns-per-ip", "8192", "--debug-listen", p.debug)
	lines := spawn(t, root, "proxy-"+name, p.cmd)
	deadline := time.After(60 * time.Second)
	for p.addr == "" || p.fpr == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("limen proxy %s exited; see %s", name, filepath.Join(root, "proxy-"+name+".log"))
			}
			if a, ok := strings.CutPrefix(l, "Limen proxy listening on https://"); ok {
				p.addr = a
			}
			if f, ok := strings.CutPrefix(l, "CA fingerprint: "); ok {
				p.fpr = f
			}
		case <-deadline:
			t.Fatalf("limen proxy %s did not start in 60 s", name)
		}
	}
	return p
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// inuse is the proxy's Go heap and stacks in use after a collection
// (/debug/pprof/heap?gc=1, whose debug=1 form ends with the runtime's
// MemStats): what a watch or a tunnel holds, free of the heap the
// runtime keeps from earlier load, which the RSS still counts.
func inuse(t *testing.T, p *proxyProc) int64 {
	t.Helper()
	resp, err := http.Get("http://" + p.debug + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var heap, stack int64 = -1, -1
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if v, ok := strings.CutPrefix(l, "# HeapInuse = "); ok {
			heap, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := strings.CutPrefix(l, "# Stack = "); ok {
			stack, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	if heap < 0 || stack < 0 {
		t.Fatalf("no HeapInuse or Stack in the proxy's heap profile")
	}
	return heap + stack
}

func rssOf(t *testing.T, p *proxyProc) int64 {
	t.Helper()
	n, err := bench.RSS(p.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// login logs user in at p with limen login and returns an HTTP client with
// the certificate it got.
func login(t *testing.T, bin, root, user, password string, p *proxyProc) *authapi.Client {
	t.Helper()
	home := filepath.Join(root, "home-"+user+"-"+p.addr)
	run(t, bin, []string{"LIMEN_HOME=" + home}, password+"\n", "login", "--proxy", p.addr, "--user", user,
		"--password-stdin", "--ca-fingerprint", p.fpr)
	prof, err := profile.Open(home, p.addr)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := prof.Credentials(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c, err := prof.Client(creds)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func run(t *testing.T, bin string, env []string, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("limen %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// spawn starts a long-running process, its output in root/NAME.log, and
// returns its stdout lines; the process ends with the test.
func spawn(t *testing.T, root, name string, cmd *exec.Cmd) <-chan string {
	t.Helper()
	logf, err := os.Create(filepath.Join(root, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("%s log (tail):\n%s", name, tail(string(b), 40))
		}
	})
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Fprintln(logf, sc.Text())
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	return lines
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}
