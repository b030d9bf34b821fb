package auditexport

import (
	"bufio"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/limenhq/limen/gateway/audit"
)

func openStore(t *testing.T) (*audit.Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := audit.Open(context.Background(), audit.Path(dir), audit.Options{Logger: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

func testLog(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(t.Output(), nil)) }

func emitN(t *testing.T, s *audit.Store, from, n int, at time.Time) {
	t.Helper()
	for i := from; i < from+n; i++ {
		e := kubeRequest()
		e.ID = 0
		e.Time = at.Add(time.Duration(i) * time.Millisecond)
		e.SessionID = fmt.Sprintf("%032x", i)
		e.Kube.Name = "pod-" + strconv.Itoa(i)
		if err := s.Emit(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
}

// receiver is a webhook receiver whose answer the test sets: 0 means 200.
type receiver struct {
	srv    *httptest.Server
	answer atomic.Int32
	mu     sync.Mutex
	got    []auditv1.Event
	bad    []error
	posts  atomic.Int32
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.posts.Add(1)
		if code := r.answer.Load(); code != 0 {
			http.Error(w, "not now", int(code))
			return
		}
		b, _ := io.ReadAll(req.Body)
		l, err := DecodeEventList(b)
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil || req.Header.Get("Content-Type") != "application/json" || req.Method != http.MethodPost {
			r.bad = append(r.bad, fmt.Errorf("%s %s %q: %v", req.Method, req.URL.Path, req.Header.Get("Content-Type"), err))
			http.Error(w, "bad", 400)
			return
		}
		r.got = append(r.got, l.Items...)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) events() []auditv1.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bad) > 0 {
		panic(fmt.Sprint(r.bad))
	}
	return append([]auditv1.Event(nil), r.got...)
}

// kubeconfig writes a webhook configuration naming srv, trusting its CA.
func kubeconfig(t *testing.T, srv *httptest.Server, path string) string {
	t.Helper()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: siem
  cluster:
    server: %s%s
    certificate-authority: ca.crt
users:
- name: limen
  user:
    token: secret-token
contexts:
- name: default
  context: {cluster: siem, user: limen}
current-context: default
`, srv.URL, path)
	f := filepath.Join(dir, "webhook.kubeconfig")
	if err := os.WriteFile(f, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestWebhookDownThenBack: events stored while the receiver answers 503
// and then 400 reach it once it accepts again, all of them, in order, in
// batches no larger than BatchSize, and the cursor is where they end.
func TestWebhookDownThenBack(t *testing.T) {
	store, dir := openStore(t)
	rcv := newReceiver(t)
	rcv.answer.Store(http.StatusServiceUnavailable)
	wh, err := LoadWebhook(kubeconfig(t, rcv.srv, "/k8s-audit"))
	if err != nil {
		t.Fatal(err)
	}
	x, err := New(store, wh, Options{DataDir: dir, BatchSize: 7, Poll: 10 * time.Millisecond,
		MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Logger: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { x.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	emitN(t, store, 0, 30, t0)
	waitFor(t, func() bool { return rcv.posts.Load() >= 3 })
	rcv.answer.Store(http.StatusBadRequest) // refused: retried, never skipped
	n := rcv.posts.Load()
	waitFor(t, func() bool { return rcv.posts.Load() >= n+3 })
	if len(rcv.events()) != 0 || x.Delivered() != 0 {
		t.Fatalf("delivered %d (cursor %d) while the receiver refused", len(rcv.events()), x.Delivered())
	}
	l, err := x.Lag(ctx)
	if err != nil || l.Events != 30 || !l.Oldest.Equal(t0) {
		t.Fatalf("lag %+v, %v; want 30 events since %s", l, err, t0)
	}
	rcv.answer.Store(0)
	emitN(t, store, 30, 20, t0)
	waitFor(t, func() bool { return len(rcv.events()) >= 50 })
	got := rcv.events()
	if len(got) != 50 {
		t.Fatalf("received %d events, want 50", len(got))
	}
	for i, e := range got {
		if e.Annotations[AnnotationSeq] != strconv.Itoa(i+1) || e.ObjectRef.Name != "pod-"+strconv.Itoa(i) {
			t.Fatalf("event %d is seq %s (%s): out of order or missing", i, e.Annotations[AnnotationSeq], e.ObjectRef.Name)
		}
	}
	if x.Failures() < 6 {
		t.Errorf("failures %d, want the refused attempts counted", x.Failures())
	}
	waitFor(t, func() bool { c, _ := ReadCursor(CursorPath(dir, "webhook")); return c == 50 })
	if l, _ := x.Lag(ctx); l.Events != 0 || !l.Oldest.IsZero() {
		t.Errorf("lag %+v after everything was delivered", l)
	}
}

// TestResumeFromCursor: a new exporter (a restarted proxy) starts after its
// cursor, so the file gets each event once when nothing failed.
func TestResumeFromCursor(t *testing.T) {
	store, dir := openStore(t)
	out := filepath.Join(t.TempDir(), "audit.jsonl")
	emitN(t, store, 0, 12, t0)
	run := func() {
		x, err := New(store, NewFile(out), Options{DataDir: dir, BatchSize: 5, Logger: testLog(t)})
		if err != nil {
			t.Fatal(err)
		}
		for {
			n, err := x.step(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return
			}
		}
	}
	run()
	emitN(t, store, 12, 3, t0)
	run()
	lines := readLines(t, out)
	if len(lines) != 15 {
		t.Fatalf("%d lines, want 15", len(lines))
	}
	for i, l := range lines {
		e, err := DecodeEvent([]byte(l))
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if e.Annotations[AnnotationSeq] != strconv.Itoa(i+1) {
			t.Fatalf("line %d is seq %s", i+1, e.Annotations[AnnotationSeq])
		}
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCursorFile(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{`{"seq":42}`, 42, true},
		{"{\"seq\":0}\n", 0, true},
		{`{"seq":-1}`, 0, false},
		{`{"seq":1,"extra":2}`, 0, false},
		{`{"seq":"1"}`, 0, false},
		{`{"seq":1}{"seq":2}`, 0, false},
		{``, 0, false},
	} {
		got, err := parseCursor([]byte(tt.in))
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseCursor(%q) = %d, %v", tt.in, got, err)
		}
	}
	p := CursorPath(t.TempDir(), "file")
	if seq, err := ReadCursor(p); err != nil || seq != 0 {
		t.Fatalf("missing cursor: %d, %v", seq, err)
	}
	if err := WriteCursor(p, 99); err != nil {
		t.Fatal(err)
	}
	if seq, err := ReadCursor(p); err != nil || seq != 99 {
		t.Fatalf("cursor %d, %v; want 99", seq, err)
	}
	os.WriteFile(p, []byte("garbage"), 0o600)
	if _, err := ReadCursor(p); err == nil {
		t.Fatal("a corrupt cursor was read")
	}
}

// TestFileToPipe: /dev/stdout in a container is a pipe, which cannot be
// synced: the file sink writes to it all the same.
func TestFileToPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	f := NewFile(fmt.Sprintf("/proc/self/fd/%d", w.Fd()))
	if err := f.Deliver(context.Background(), []auditv1.Event{Map(kubeRequest())}); err != nil {
		t.Fatalf("deliver to a pipe: %v", err)
	}
	line, err := bufio.NewReader(r).ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeEvent(line); err != nil {
		t.Fatal(err)
	}
}
