package e2e

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/test/cluster/clustertest"
)

// apiServerExecs is the API server's own count of the pods/exec requests it
// has served (apiserver_request_total for verb CONNECT, subresource exec),
// read from its /metrics: what reached it, whatever Limen believes.
func apiServerExecs(t *testing.T) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := clustertest.Cluster(t).Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("read the API server's metrics: %v", err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `subresource="exec"`) ||
			!strings.Contains(line, `verb="CONNECT"`) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		n += int(v)
	}
	return n
}

// waitAPIServerExecs waits until the API server has counted want exec
// requests and fails if it counts more.
func waitAPIServerExecs(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := apiServerExecs(t)
		if got > want {
			t.Fatalf("the API server served %d exec requests, want %d: a refused exec reached it", got, want)
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server counts %d exec requests, want %d", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Issue 11, "nothing starts unrecorded or unaudited": an exec goes to the
// API server only once its recording is open in the worker's spool and its
// session.start is stored. Each test runs a command that leaves a mark (a
// file the fake kubelet's local process creates) while one of the two is
// broken: the mark must never appear and kubectl must fail with the 503's
// reason. The same exec with the fault gone then leaves the mark, so the
// check could see a command that ran, and the API server's own request count
// shows that exec and no other reached it.

// TestStreamNothingStartsUnrecorded breaks the real worker's spool: its
// directory is replaced by a file, as when the volume under it is gone.
func TestStreamNothingStartsUnrecorded(t *testing.T) {
	e := gateway(t)
	kc := userKubeconfig(t, "alice")
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "marks", []string{"sleep", "infinity"}, false)
	spool := filepath.Join(e.Dir, "worker", "recordings")
	marks := t.TempDir()
	for _, c := range execClients {
		t.Run(c.transport, func(t *testing.T) {
			mark := filepath.Join(marks, "unrecorded-"+c.transport)
			starts, execs := sessionStarts(t, ns, "marks"), apiServerExecs(t)
			restore := breakDir(t, spool)
			_, stderr, code := c.run(t, kc, "", "-n", ns, "exec", "marks", "--", "touch", mark)
			restore()
			t.Logf("kubectl exit %d: %s", code, strings.TrimSpace(stderr))
			assertNoMark(t, mark)
			if code == 0 || !strings.Contains(stderr, "cannot record the session, so it did not start it") {
				t.Fatalf("exec with the spool broken: exit %d, stderr %q; want a failure saying the session could not be recorded", code, stderr)
			}
			if n := sessionStarts(t, ns, "marks") - starts; n != 0 {
				t.Fatalf("%d session.start events for the refused exec", n)
			}
			ev := lastKubeRequest(t, ns, "marks")
			if ev.Kube.Status != 503 || ev.Kube.Subresource != "exec" || ev.Kube.Verb == "" {
				t.Fatalf("kube.request of the refused exec = %+v, want status 503 with its classification", ev.Kube)
			}

			if _, stderr, code := c.run(t, kc, "", "-n", ns, "exec", "marks", "--", "touch", mark); code != 0 {
				t.Fatalf("exec with the spool back: exit %d, stderr %q", code, stderr)
			}
			if _, err := os.Stat(mark); err != nil {
				t.Fatalf("the exec with the spool back left no mark (%v): the test cannot see a command that ran", err)
			}
			// The API server counted the exec that ran, and no other.
			waitAPIServerExecs(t, execs+1)
		})
	}
}

// TestStreamNothingStartsUnaudited makes the proxy's SQLite audit store
// unavailable the moment the worker asks it to store session.start: another
// connection takes the database's write lock (BEGIN IMMEDIATE), as a backup
// or an operator's sqlite3 shell would, so the store's commit fails once its
// busy timeout passes. The hops (proxy and worker in this process) are used
// because kubectl's own GET of the pod, a moment earlier, needs the same
// store: the fault must come between the two, and only a hook on the worker's
// event channel can time it.
func TestStreamNothingStartsUnaudited(t *testing.T) {
	h := newHops(t)
	kc := h.recordStreams(t)
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "marks", []string{"sleep", "infinity"}, false)
	marks := t.TempDir()
	var lock sqliteLock
	defer lock.release()
	events := h.worker.Events
	lockFirst := func(ctx context.Context, ev audit.Event) error {
		if ev.Type == audit.TypeSessionStart {
			lock.take(t, h.storePath)
		}
		return events(ctx, ev)
	}
	for _, c := range execClients {
		t.Run(c.transport, func(t *testing.T) {
			mark := filepath.Join(marks, "unaudited-"+c.transport)
			execs := apiServerExecs(t)
			h.worker.Events = lockFirst
			_, stderr, code := c.run(t, kc, "", "-n", ns, "exec", "marks", "--", "touch", mark)
			if !lock.release() {
				t.Fatal("the worker never asked to store session.start")
			}
			t.Logf("kubectl exit %d: %s", code, strings.TrimSpace(stderr))
			assertNoMark(t, mark)
			if code == 0 || !strings.Contains(stderr, "audit trail is unavailable") {
				t.Fatalf("exec with the audit store locked: exit %d, stderr %q; want a failure saying the audit trail is unavailable", code, stderr)
			}

			h.worker.Events = events
			if _, stderr, code := c.run(t, kc, "", "-n", ns, "exec", "marks", "--", "touch", mark); code != 0 {
				t.Fatalf("exec with the audit store back: exit %d, stderr %q", code, stderr)
			}
			if _, err := os.Stat(mark); err != nil {
				t.Fatalf("the exec with the audit store back left no mark (%v): the test cannot see a command that ran", err)
			}
			waitAPIServerExecs(t, execs+1)
		})
	}
}

// breakDir replaces dir by a regular file until the returned func restores
// it.
func breakDir(t *testing.T, dir string) func() {
	t.Helper()
	away := dir + ".away"
	if err := os.Rename(dir, away); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("not a directory\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	restore := func() {
		once.Do(func() {
			if err := os.Remove(dir); err != nil {
				t.Errorf("restore %s: %v", dir, err)
			}
			if err := os.Rename(away, dir); err != nil {
				t.Errorf("restore %s: %v", dir, err)
			}
		})
	}
	t.Cleanup(restore)
	return restore
}

func assertNoMark(t *testing.T, mark string) {
	t.Helper()
	if _, err := os.Stat(mark); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the refused exec ran in the pod: %s exists (stat: %v)", mark, err)
	}
}

// sqliteLock holds an SQLite database's write lock from a connection of
// its own.
type sqliteLock struct {
	mu   sync.Mutex
	db   *sql.DB
	conn *sql.Conn
	took bool
}

// take locks the database at path, if not locked already.
func (l *sqliteLock) take(t *testing.T, path string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.took = true
	if l.conn != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Errorf("open %s: %v", path, err)
		return
	}
	conn, err := db.Conn(ctx)
	if err == nil {
		_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	}
	if err != nil {
		db.Close()
		t.Errorf("lock %s: %v", path, err)
		return
	}
	l.db, l.conn = db, conn
}

// release gives the lock back and reports whether take was called since the
// last release.
func (l *sqliteLock) release() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		_, _ = l.conn.ExecContext(context.Background(), "ROLLBACK")
		l.conn.Close()
		l.db.Close()
		l.conn, l.db = nil, nil
	}
	took := l.took
	l.took = false
	return took
}

// openAudit opens the shared proxy's audit store for reading.
func openAudit(t *testing.T) *audit.Store {
	t.Helper()
	st, err := audit.Open(context.Background(), audit.Path(proxyDataDir(t)), audit.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("open audit store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// sessionStarts counts the session.start events on a pod of the shared
// proxy's audit.
func sessionStarts(t *testing.T, ns, pod string) int {
	t.Helper()
	evs, err := openAudit(t).Search(context.Background(), audit.Query{Type: audit.TypeSessionStart, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range evs {
		if ev.Session.Namespace == ns && ev.Session.Pod == pod {
			n++
		}
	}
	return n
}

// lastKubeRequest is the newest kube.request on a pod's subresources in the
// shared proxy's audit. The proxy appends a request's outcome after it
// relayed the response, so it first waits until every request on the pod's
// subresources that the proxy recorded (kube.sent) has its outcome.
func lastKubeRequest(t *testing.T, ns, pod string) audit.Event {
	t.Helper()
	st := openAudit(t)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		pending, err := st.Search(context.Background(), audit.Query{OutcomeUnknown: true, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(pending, func(ev audit.Event) bool {
			k := ev.Kube
			return k.Namespace == ns && k.Name == pod && k.Subresource != ""
		}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a request on a subresource of %s/%s has no outcome stored after 30s", ns, pod)
		}
	}
	evs, err := st.Search(context.Background(), audit.Query{Type: audit.TypeKubeRequest, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if k := evs[i].Kube; k.Namespace == ns && k.Name == pod && k.Subresource != "" {
			return evs[i]
		}
	}
	t.Fatalf("no kube.request on a subresource of %s/%s", ns, pod)
	return audit.Event{}
}
