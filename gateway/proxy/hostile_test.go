package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/grant"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/tunnel"
)

// hostileWorker stands in for a compromised worker (named as such): the real
// worker never forges, so no real one can show what the proxy does when a
// worker lies. It holds a real enrollment for cluster demo and speaks the
// real protocol — the tunnel (tunnel.Client, TLS, yamux, the control stream
// with its lock acknowledgements), the grant preamble, audit frames and
// HTTP/1.1 on each request stream — but answers each request as the test
// tells it, keyed by the namespace in the request's path.
type hostileWorker struct {
	id      *enroll.WorkerIdentity
	client  *tunnel.Client
	answers map[string]func(s *hostileStream) // set before the tunnel starts
}

// hostileStream is one request stream as the hostile worker sees it: the
// grant it verified and the stream's own facts beside it, the request, and
// the stream to answer on.
type hostileStream struct {
	w     *hostileWorker
	conn  net.Conn
	grant grant.Grant
	sreq  grant.Request
	req   *http.Request
	// closed is closed once the worker sees the proxy end the stream.
	closed chan struct{}
}

// honest is the kube.request the real worker would send for this stream.
func (s *hostileStream) honest() audit.Event {
	g := s.grant
	return audit.Event{Type: audit.TypeKubeRequest, Time: time.Now(), Principal: g.Principal, Groups: g.Groups,
		Cluster: g.Cluster, SessionID: s.sreq.SessionID, ClientAddr: s.sreq.ClientAddr,
		Kube: &audit.KubeRequest{Verb: "list", Resource: "configmaps", Method: "GET", Path: s.req.URL.Path, Status: 200}}
}

func (s *hostileStream) write(b string) error {
	_, err := io.WriteString(s.conn, b)
	return err
}

// reply sends ev and a small response the user must never see unless ev is
// accepted.
func (s *hostileStream) reply(ev audit.Event) {
	if err := audit.WriteEvent(s.conn, ev); err != nil {
		return
	}
	_ = s.write("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 8\r\n\r\nforged!\n")
}

// waitClosed blocks until the proxy closes the stream.
func (s *hostileStream) waitClosed() {
	_, _ = io.Copy(io.Discard, s.conn)
	close(s.closed)
}

// serve is the hostile worker's tunnel Handler.
func (w *hostileWorker) serve(ctx context.Context, conn net.Conn) {
	br := bufio.NewReader(conn)
	tok, err := grant.ReadPreamble(br, grant.MaxTokenSize)
	if err != nil {
		return
	}
	g, err := grant.Verify(w.id.GrantKey, tok, w.id.Cluster, time.Now())
	if err != nil {
		return
	}
	sreq, err := grant.ReadRequest(br)
	if err != nil {
		return
	}
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	ns := strings.Split(req.URL.Path, "/")[4] // /api/v1/namespaces/NS/…
	if answer := w.answers[ns]; answer != nil {
		answer(&hostileStream{w: w, conn: conn, grant: g, sreq: sreq, req: req, closed: make(chan struct{})})
	}
}

// report sends ev on the control stream as the real worker sends a session
// event, and returns the proxy's answer: "" when it stored the event.
func (w *hostileWorker) report(ev audit.Event) string {
	m, err := tunnel.NewMessage(audit.MsgEvent, ev)
	if err != nil {
		return "encode: " + err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	reply, err := w.client.Request(ctx, m)
	if err != nil {
		return "control stream: " + err.Error()
	}
	var ack audit.EventAck
	if err := reply.Decode(&ack); err != nil {
		return "ack: " + err.Error()
	}
	return ack.Error
}

// upload sends data as the whole recording of session id on an upload
// stream of its own, as the real worker's uploader does, and returns the
// proxy's answer: "" when it stored the recording.
func (w *hostileWorker) upload(id string, data []byte) string {
	sum := sha256.Sum256(data)
	return w.uploadAs(recstore.Header{ID: id, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}, data)
}

// uploadAs uploads data under header h, which may lie about it.
func (w *hostileWorker) uploadAs(h recstore.Header, data []byte) string {
	conn, err := w.open()
	if err != nil {
		return "open: " + err.Error()
	}
	defer conn.Close()
	r, err := recstore.Send(conn, h, bytes.NewReader(data))
	switch {
	case err != nil:
		return "upload stream: " + err.Error()
	case r.Status == recstore.Refused:
		return r.Reason
	case r.Status != recstore.Stored || r.SHA256 != h.SHA256:
		return fmt.Sprintf("answered %+v", r)
	}
	return ""
}

// open opens an upload stream to the proxy.
func (w *hostileWorker) open() (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	conn, err := w.client.OpenStream(ctx, recstore.StreamKind)
	if err == nil {
		_ = conn.SetDeadline(time.Now().Add(deadline))
	}
	return conn, err
}

// hostileEnv is the assembled proxy on its real TLS port, the hostile
// worker connected to it, and an HTTP client holding alice's certificate.
type hostileEnv struct {
	dir    string      // the proxy's data directory
	log    *syncBuffer // the proxy's log
	proxy  *proxy.Server
	worker *hostileWorker
	http   *http.Client
	base   string
}

// startHostile starts the proxy with a short head timeout (configure sets
// more), enrolls the hostile worker and returns once the proxy counts it as
// connected, which it does only after the worker acknowledged the lock list.
func startHostile(t *testing.T, answers map[string]func(s *hostileStream), configure ...func(*proxy.Config)) *hostileEnv {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	dir := t.TempDir()
	cfg := proxy.Config{DataDir: filepath.Join(dir, "proxy"), Clusters: []string{testCluster}, Logger: log}
	for _, c := range configure {
		c(&cfg)
	}
	p, err := proxy.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	// Long enough for any honest worker on loopback; the test waits for the
	// refusal, never measures it.
	p.Kube.WorkerHeadTimeout = time.Second
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { _ = p.Serve(ctx, ln) })

	tok, _, err := p.Tokens.Create(ctx, testCluster, 10*time.Minute, p.CA.Fingerprint(), identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := enroll.Enroll(ctx, enroll.Options{Proxy: ln.Addr().String(), Cluster: testCluster, Token: tok.String(), DataDir: filepath.Join(dir, "worker")})
	if err != nil {
		t.Fatal(err)
	}
	w := &hostileWorker{id: id, answers: answers}
	ackLocks := locks.NewSet()
	w.client = &tunnel.Client{Addr: id.Proxy, TLSConfig: id.TLSConfig(),
		Hello:   tunnel.Hello{Cluster: id.Cluster, WorkerID: "hostile", Version: "test"},
		Handler: w.serve,
		OnMessage: func(ctx context.Context, m tunnel.Message) {
			reply, err := ackLocks.HandleMessage(m)
			if err == nil {
				go func() { _ = w.client.Send(ctx, reply) }()
			}
		},
	}
	wg.Go(func() { _ = w.client.Run(ctx) })
	waitUntil(t, "the hostile worker to connect", func() bool { return p.Tunnel.Connected(testCluster) && w.client.Connected() })

	key, err := ca.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := p.CA.IssueUser(key.Public(), alice, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.CA.RootCert())
	hc := &http.Client{Timeout: 2 * deadline, Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{
		RootCAs: roots, MinVersion: tls.VersionTLS13,
		Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key}},
	}}}
	t.Cleanup(hc.CloseIdleConnections)
	return &hostileEnv{dir: filepath.Join(dir, "proxy"), log: logs, proxy: p, worker: w, http: hc, base: "https://" + ln.Addr().String()}
}

// get lists configmaps in namespace ns through the proxy as alice, with
// query q.
func (e *hostileEnv) get(ctx context.Context, ns, q string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"/k8s/demo/api/v1/namespaces/"+ns+"/configmaps?"+q, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := e.http.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// reported returns the stored events a worker could have caused: every
// event but the token.create and token.use of the enrollment. The proxy
// queues a request's outcome before it relays the response but does not
// wait for its commit, so every event queued so far is flushed first.
func (e *hostileEnv) reported(t *testing.T) []audit.Event {
	t.Helper()
	if err := e.proxy.Audit.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	all, err := e.proxy.Audit.Search(context.Background(), audit.Query{})
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Event
	for _, ev := range all {
		if ev.Type != audit.TypeTokenCreate && ev.Type != audit.TypeTokenUse {
			out = append(out, ev)
		}
	}
	return out
}

var mallory = identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "mallory", Traits: map[string][]string{"groups": {"admins"}}}

const otherSession = "0123456789abcdef0123456789abcdef"

// TestHostileWorkerRequestStream: a compromised worker answers requests
// with forged audit events and broken response heads. Each is refused — the
// user gets 502 and none of the worker's response — and nothing of it is
// stored: only the proxy's own record of the request it sent (kube.sent),
// flagged as having no known outcome; the honest answers, the controls (a response, and a refusal of a
// grant the worker could not verify), are relayed and stored as the proxy's
// own grant says.
func TestHostileWorkerRequestStream(t *testing.T) {
	forge := func(change func(ev *audit.Event)) func(s *hostileStream) {
		return func(s *hostileStream) {
			ev := s.honest()
			change(&ev)
			s.reply(ev)
		}
	}
	// honestEvent sends the true event, then breaks the head with rest.
	honestEvent := func(rest func(s *hostileStream)) func(s *hostileStream) {
		return func(s *hostileStream) {
			if audit.WriteEvent(s.conn, s.honest()) == nil {
				rest(s)
			}
		}
	}
	endless := func(s *hostileStream, first, each string) {
		if s.write(first) != nil {
			return
		}
		for s.write(each) == nil {
		}
	}
	cases := []struct {
		ns     string
		answer func(s *hostileStream)
		why    string // in the proxy's log, not shown to the user
	}{
		{"another-session", forge(func(ev *audit.Event) { ev.SessionID = otherSession }), "for session"},
		{"another-cluster", forge(func(ev *audit.Event) { ev.Cluster = "prod" }), `for cluster "prod"`},
		{"foreign-principal", forge(func(ev *audit.Event) { ev.Principal = mallory }), "names user:mallory"},
		{"denial-naming-another-user", forge(func(ev *audit.Event) {
			ev.Type, ev.Kube, ev.Principal = audit.TypeAuthDenied, nil, mallory
			ev.Denied = &audit.Denied{Hop: audit.HopWorker, Action: audit.ActionKube, Reason: "grant: forged"}
		}), "auth.denied names user:mallory"},
		{"denial-for-no-session", forge(func(ev *audit.Event) {
			ev.Type, ev.Kube, ev.SessionID, ev.Principal = audit.TypeAuthDenied, nil, "", identity.Principal{}
			ev.Denied = &audit.Denied{Hop: audit.HopWorker, Action: audit.ActionKube, Reason: "grant: forged"}
		}), `auth.denied for session ""`},
		{"foreign-group", forge(func(ev *audit.Event) { ev.Groups = append(ev.Groups, "limen:admin") }), `group "limen:admin"`},
		{"never-emitted-type", forge(func(ev *audit.Event) {
			ev.Type, ev.Kube, ev.Fields = audit.TypeUserUnlock, nil, map[string]string{"user": "mallory"}
		}), "not user.unlock"},
		{"session-event-on-request-stream", forge(func(ev *audit.Event) {
			ev.Type, ev.Kube, ev.Session = audit.TypeSessionStart, nil, &audit.Session{Kind: "kube", Login: "exec"}
		}), "not session.start"},
		{"admin-denial", forge(func(ev *audit.Event) {
			ev.Type, ev.Kube, ev.Denied = audit.TypeAuthDenied, nil, &audit.Denied{Hop: audit.HopWorker, Action: audit.ActionAdmin, Reason: "forged"}
		}), "only kube requests, not admin"},
		{"proxy-hop-denial", forge(func(ev *audit.Event) {
			ev.Type, ev.Kube, ev.Denied = audit.TypeAuthDenied, nil, &audit.Denied{Hop: audit.HopProxy, Action: audit.ActionKube, Reason: "forged"}
		}), "only its own refusals"},
		{"oversized-head", honestEvent(func(s *hostileStream) {
			endless(s, "HTTP/1.1 200 OK\r\n", "X-Pad: "+strings.Repeat("a", 1000)+"\r\n")
		}), "over 1048576 bytes"},
		{"endless-status-line", honestEvent(func(s *hostileStream) {
			endless(s, "HTTP/1.1 200 ", strings.Repeat("a", 4096))
		}), "over 1048576 bytes"},
		{"head-never-comes", honestEvent(func(s *hostileStream) {
			if s.write("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n") == nil {
				s.waitClosed()
			}
		}), "did not come within 1s"},
		{"event-never-ends", func(s *hostileStream) {
			if s.write("\x00\x00\x01") == nil { // three of the four length bytes
				s.waitClosed()
			}
		}, "did not come within 1s"},
	}
	answers := map[string]func(*hostileStream){
		"honest": func(s *hostileStream) { s.reply(s.honest()) },
		// A worker that could not verify the grant (here: one configured
		// for another cluster) knows the stream's session but not its
		// principal; the proxy fills in the grant's principal and cluster.
		"honest-unverified-denial": func(s *hostileStream) {
			ev := s.honest()
			ev.Type, ev.Kube, ev.Principal, ev.Groups, ev.Cluster = audit.TypeAuthDenied, nil, identity.Principal{}, nil, "prod"
			ev.Denied = &audit.Denied{Hop: audit.HopWorker, Action: audit.ActionKube, Reason: "grant: expired"}
			if audit.WriteEvent(s.conn, ev) == nil {
				_ = s.write("HTTP/1.1 403 Forbidden\r\nContent-Length: 7\r\n\r\ngrant!\n")
			}
		},
	}
	for _, c := range cases {
		answers[c.ns] = c.answer
	}
	e := startHostile(t, answers)

	// The control: the harness relays and stores an honest answer.
	code, body, err := e.get(context.Background(), "honest", "")
	if err != nil || code != http.StatusOK || body != "forged!\n" {
		t.Fatalf("honest answer: %d %q %v, want 200 and the worker's body", code, body, err)
	}
	evs := e.reported(t)
	if len(evs) != 1 || evs[0].Type != audit.TypeKubeRequest || evs[0].Principal.Name != "alice" || evs[0].Cluster != testCluster {
		t.Fatalf("honest answer stored %+v, want alice's kube.request on demo", evs)
	}
	code, body, err = e.get(context.Background(), "honest-unverified-denial", "")
	if err != nil || code != http.StatusForbidden || body != "grant!\n" {
		t.Fatalf("the worker's refusal: %d %q %v, want its 403", code, body, err)
	}
	evs = e.reported(t)
	if len(evs) != 2 || evs[1].Type != audit.TypeAuthDenied || evs[1].Principal.Name != "alice" || evs[1].SessionID == "" ||
		evs[1].Cluster != testCluster {
		t.Fatalf("the worker's refusal stored %+v, want an auth.denied in alice's name on demo, from the grant", evs)
	}

	for _, c := range cases {
		t.Run(c.ns, func(t *testing.T) {
			before := len(e.reported(t))
			code, body, err := e.get(context.Background(), c.ns, "")
			if err != nil {
				t.Fatal(err)
			}
			if code != http.StatusBadGateway || strings.Contains(body, "forged") || !strings.Contains(body, "refused the worker's answer") {
				t.Fatalf("%d %q, want 502 saying the worker's answer was refused, without its body", code, body)
			}
			evs := e.reported(t)
			if len(evs) != before+1 {
				t.Fatalf("stored %+v, want only the proxy's kube.sent", evs[before:])
			}
			if sent := evs[before]; sent.Type != audit.TypeKubeSent || !sent.OutcomeUnknown || sent.Principal.Name != "alice" ||
				sent.Cluster != testCluster || sent.Kube.Path != "/api/v1/namespaces/"+c.ns+"/configmaps" || sent.Kube.Status != 0 {
				t.Fatalf("stored %+v %+v, want the proxy's kube.sent of alice's request, its outcome unknown", sent, sent.Kube)
			}
			if line := e.log.line("worker answer refused", "namespaces/"+c.ns+"/"); !strings.Contains(line, c.why) {
				t.Fatalf("the proxy logged %q, want the refusal with %q", line, c.why)
			}
		})
	}
}

// TestHostileWorkerNoAnswer: a compromised worker that never answers holds
// nothing once the user gives up: the proxy closes its stream, and the
// request is stored as sent with no known outcome.
func TestHostileWorkerNoAnswer(t *testing.T) {
	got := make(chan *hostileStream, 1)
	e := startHostile(t, map[string]func(*hostileStream){"silent": func(s *hostileStream) {
		got <- s
		s.waitClosed()
	}})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, _, err := e.get(ctx, "silent", ""); errc <- err }()
	var s *hostileStream
	select {
	case s = <-got:
	case <-time.After(deadline):
		t.Fatal("the request never reached the worker")
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("request: %v, want the client's cancellation", err)
	}
	select {
	case <-s.closed:
	case <-time.After(deadline):
		t.Fatal("the proxy kept the silent worker's stream open after the user left")
	}
	// The request went to the worker, so the proxy's record of it stays,
	// flagged: nothing says what became of it.
	if evs := e.reported(t); len(evs) != 1 || evs[0].Type != audit.TypeKubeSent || !evs[0].OutcomeUnknown {
		t.Fatalf("stored %+v, want only the proxy's kube.sent, its outcome unknown", evs)
	}
}

// TestHostileWorkerControlStream: while the proxy relays a watch to it, a
// compromised worker reports session events on its control stream for
// another cluster, for sessions the proxy never relayed to it or relayed to
// another cluster, in another user's name, and of types a worker never
// emits there, and uploads recordings of sessions that are not its
// cluster's exec or attach. Each is refused with a reason and nothing of it
// is stored; the honest session.start and session.end of its own session,
// and the recording of an exec of its cluster, are.
func TestHostileWorkerControlStream(t *testing.T) {
	type forgery struct {
		name string
		ev   func(own audit.Event) audit.Event
		why  string
	}
	const prodSession = "fedcba9876543210fedcba9876543210"
	const demoExec = "abcdefabcdefabcdefabcdefabcdef01"
	forgeries := []forgery{
		{"another cluster", func(ev audit.Event) audit.Event { ev.Cluster = "prod"; return ev }, `may not report for cluster "prod"`},
		{"a session relayed to another cluster", func(ev audit.Event) audit.Event { ev.SessionID = prodSession; return ev },
			`relayed to cluster "prod"`},
		{"a session never relayed", func(ev audit.Event) audit.Event { ev.SessionID = otherSession; return ev }, "did not relay"},
		{"the end of a session never relayed", func(ev audit.Event) audit.Event {
			ev.Type, ev.SessionID = audit.TypeSessionEnd, otherSession
			return ev
		}, "did not relay"},
		{"no session", func(ev audit.Event) audit.Event { ev.SessionID = ""; return ev }, "names no session"},
		{"a foreign principal", func(ev audit.Event) audit.Event { ev.Principal = mallory; return ev }, "names user:mallory"},
	}
	for _, typ := range []audit.Type{audit.TypeKubeRequest, audit.TypeAuthDenied, audit.TypeUserUnlock, audit.TypeSessionKill, audit.TypeAuthLogin} {
		forgeries = append(forgeries, forgery{"type " + string(typ), func(ev audit.Event) audit.Event {
			ev.Type, ev.Session = typ, nil
			switch typ {
			case audit.TypeKubeRequest:
				ev.Kube = &audit.KubeRequest{Method: "GET", Path: "/api", Status: 200}
			case audit.TypeAuthDenied:
				ev.Denied = &audit.Denied{Hop: audit.HopWorker, Action: audit.ActionKube, Reason: "forged"}
			}
			return ev
		}, fmt.Sprintf("%q may not be sent on the control stream", typ)})
	}

	refusals := make(chan []string, 1)
	var ownSession string
	e := startHostile(t, map[string]func(*hostileStream){"hold": func(s *hostileStream) {
		g := s.grant
		ownSession = s.sreq.SessionID
		start := audit.Event{Type: audit.TypeSessionStart, Time: time.Now(), Principal: g.Principal, Groups: g.Groups,
			Cluster: g.Cluster, SessionID: s.sreq.SessionID, ClientAddr: s.sreq.ClientAddr,
			Session: &audit.Session{Kind: sessions.AuditKind, Login: string(sessions.KindWatch), Namespace: "hold"}}
		var got []string
		for _, f := range forgeries {
			got = append(got, s.w.report(f.ev(start)))
		}
		got = append(got, s.w.report(start))
		end := start
		end.Type, end.Session = audit.TypeSessionEnd, &audit.Session{Kind: sessions.AuditKind, Login: string(sessions.KindWatch),
			EndReason: audit.EndCompleted, EndHop: audit.HopWorker}
		got = append(got, s.w.report(end))
		// Recordings: of a session never relayed, of one relayed to
		// another cluster, of its own watch (never recorded), and, the
		// control, of an exec the proxy relayed to its cluster.
		for _, id := range []string{otherSession, prodSession, ownSession, demoExec} {
			got = append(got, s.w.upload(id, []byte("forged recording\n")))
		}
		refusals <- got
		s.reply(s.honest())
	}})
	// Sessions the proxy relays, as ServeHTTP registers them: an exec to
	// cluster prod, and one to demo.
	for _, s := range []sessions.Session{
		{ID: prodSession, Principal: alice, Cluster: "prod", Kind: sessions.KindExec, Expires: time.Now().Add(time.Hour)},
		{ID: demoExec, Principal: alice, Cluster: testCluster, Kind: sessions.KindExec, Expires: time.Now().Add(time.Hour)},
	} {
		live, err := e.proxy.Sessions.Track(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		defer live.End(sessions.ReasonCompleted)
	}

	code, body, err := e.get(context.Background(), "hold", "watch=1")
	if err != nil || code != http.StatusOK {
		t.Fatalf("the watch: %d %q %v", code, body, err)
	}
	got := <-refusals
	for i, f := range forgeries {
		if !strings.Contains(got[i], f.why) {
			t.Errorf("%s: the proxy answered %q, want a refusal with %q", f.name, got[i], f.why)
		}
	}
	if start, end := got[len(forgeries)], got[len(forgeries)+1]; start != "" || end != "" {
		t.Fatalf("honest session.start refused (%q) or session.end refused (%q)", start, end)
	}
	recs := got[len(forgeries)+2:]
	for i, why := range []string{"which this proxy did not relay", `relayed to cluster "prod", not "demo"`, "a watch, which Limen does not record"} {
		if !strings.Contains(recs[i], why) {
			t.Errorf("forged recording %d: the proxy answered %q, want a refusal with %q", i, recs[i], why)
		}
	}
	if recs[3] != "" {
		t.Fatalf("the recording of demo's exec was refused: %s", recs[3])
	}
	store, err := recstore.OpenExisting(recstore.Path(e.dir))
	if err != nil {
		t.Fatal(err)
	}
	if stored, err := store.List(); err != nil || len(stored) != 1 || stored[0].ID != demoExec || stored[0].Cluster != testCluster {
		t.Fatalf("the recording store holds %+v (%v), want only demo's exec", stored, err)
	}
	var types []string
	for _, ev := range e.reported(t) {
		types = append(types, string(ev.Type))
		if ev.SessionID != ownSession || ev.Principal.Name != "alice" || ev.Cluster != testCluster {
			t.Errorf("stored %s of %s for session %s on %q, want only alice's own session on demo", ev.Type, ev.Principal, ev.SessionID, ev.Cluster)
		}
	}
	if strings.Join(types, ",") != "session.start,session.end,kube.request" {
		t.Fatalf("stored %v, want the honest session.start, session.end and kube.request only", types)
	}
}

// syncBuffer collects log lines from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// line returns the last log line holding every one of parts, with the
// text handler's quoting of quotes undone.
func (s *syncBuffer) line(parts ...string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	lines := strings.Split(strings.ReplaceAll(s.b.String(), `\"`, `"`), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(lines[i], p)
		}
		if all {
			return lines[i]
		}
	}
	return ""
}
