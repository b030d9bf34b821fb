package e2e

import (
	"bufio"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/auditexport"
	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
)

// Issue 29 item 4: the audit trail exported as the API server's own
// audit.k8s.io/v1 Events, to a webhook receiver the test runs (a TLS
// server on loopback) and to a JSON-lines file. The receiver is down —
// its port closed — for part of the run; once it is back it receives every
// event the proxy stored, each decoded strictly by the API server's audit
// types, none missing, in order.

// siem is the test's webhook receiver. It can be taken down (its listener
// closed, connections refused) and brought back on the same address.
type siem struct {
	t     *testing.T
	addr  string
	token string
	mu    sync.Mutex
	srv   *httptest.Server
	items []auditv1.Event
	bad   []string
	posts int
}

func newSIEM(t *testing.T) *siem {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &siem{t: t, addr: ln.Addr().String(), token: "siem-token-1"}
	s.start(ln)
	t.Cleanup(s.down)
	return s
}

func (s *siem) start(ln net.Listener) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	srv.Listener = ln
	srv.StartTLS()
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
}

func (s *siem) serve(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.posts++
	switch {
	case err != nil:
		s.bad = append(s.bad, "read body: "+err.Error())
	case r.Method != http.MethodPost || r.URL.Path != "/k8s-audit" || r.Header.Get("Authorization") != "Bearer "+s.token:
		s.bad = append(s.bad, fmt.Sprintf("%s %s with %q", r.Method, r.URL.Path, r.Header.Get("Authorization")))
	default:
		l, err := auditexport.DecodeEventList(b)
		if err != nil {
			s.bad = append(s.bad, err.Error())
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.items = append(s.items, l.Items...)
		return
	}
	http.Error(w, "refused", http.StatusBadRequest)
}

// down closes the receiver: its port refuses connections.
func (s *siem) down() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// up opens the receiver again on its address, with the same certificate
// (httptest's).
func (s *siem) up() {
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("listen again on %s: %v", s.addr, err)
	}
	s.start(ln)
}

func (s *siem) received() ([]auditv1.Event, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.bad) > 0 {
		s.t.Fatalf("the receiver got bad posts: %q", s.bad)
	}
	return slices.Clone(s.items), s.posts
}

// kubeconfig writes the webhook configuration the proxy gets: the
// receiver's URL, its CA and a bearer token.
func (s *siem) kubeconfig(dir string) string {
	s.mu.Lock()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
	s.mu.Unlock()
	if err := os.WriteFile(filepath.Join(dir, "siem-ca.crt"), ca, 0o600); err != nil {
		s.t.Fatal(err)
	}
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: siem
  cluster:
    server: https://%s/k8s-audit
    certificate-authority: siem-ca.crt
users:
- name: limen
  user:
    token: %s
contexts:
- name: siem
  context: {cluster: siem, user: limen}
current-context: siem
`, s.addr, s.token)
	path := filepath.Join(dir, "webhook.kubeconfig")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		s.t.Fatal(err)
	}
	return path
}

// firstSeen is the events in the order of their first delivery: at least
// once may deliver a batch again (the receiver stored it, the proxy never
// saw the answer), never out of order.
func firstSeen(t *testing.T, items []auditv1.Event) []auditv1.Event {
	t.Helper()
	var out []auditv1.Event
	var last int64
	for _, e := range items {
		seq, err := strconv.ParseInt(e.Annotations[auditexport.AnnotationSeq], 10, 64)
		if err != nil {
			t.Fatalf("event %s without a sequence number: %v", e.AuditID, err)
		}
		if seq <= last {
			continue // a redelivered batch
		}
		if seq != last+1 {
			t.Fatalf("event %d follows event %d: events %d to %d are missing", seq, last, last+1, seq-1)
		}
		out = append(out, e)
		last = seq
	}
	return out
}

// storedCount is the number of events the proxy's audit store holds (the
// ids start at 1 and nothing is deleted in this run).
func storedCount(t *testing.T, e *gatewaytest.Env) int64 {
	t.Helper()
	st, err := audit.Open(context.Background(), audit.Path(e.ProxyDataDir()), audit.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sp, err := st.Span(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if sp.First > 1 {
		t.Fatalf("the store starts at event %d; nothing should be deleted", sp.First)
	}
	return sp.Last
}

func TestAuditExportReceiverDown(t *testing.T) {
	rcv := newSIEM(t)
	cfgDir := t.TempDir()
	exportFile := filepath.Join(cfgDir, "audit.jsonl")
	metricsAddr := freeAddr(t)
	e := extraGateway(t, "an audit export", gatewaytest.Options{ProxyArgs: []string{
		"--audit-webhook-config", rcv.kubeconfig(cfgDir), "--audit-export-file", exportFile,
		"--audit-export-max-backoff", "2s", "--metrics-listen", metricsAddr,
	}})
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "shell", []string{"sh", "-c", "sleep 3600"}, false)
	kc := login(t, e, "alice")
	bob := login(t, e, "bob")
	run := func(kubeconfig string, wantCode int, args ...string) {
		t.Helper()
		out, errOut, code := kubectl(t, kubeconfig, "", append([]string{"-n", ns}, args...)...)
		if code != wantCode {
			t.Fatalf("kubectl %v: exit %d, want %d: %s %s", args, code, wantCode, out, errOut)
		}
	}
	waitDelivered := func(what string) []auditv1.Event {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			items, _ := rcv.received()
			got := firstSeen(t, items)
			n := storedCount(t, e)
			if int64(len(got)) == n {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the receiver has %d of the %d events stored", what, len(got), n)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// Up: the first requests arrive.
	run(kc, 0, "get", "pods")
	run(kc, 0, "create", "configmap", "before", "--from-literal=a=1")
	waitDelivered("receiver up")

	// Down: requests go on (the export never holds them up), the lag shows
	// in limen proxy status and in the metrics.
	rcv.down()
	_, postsWhileUp := rcv.received()
	run(kc, 0, "create", "configmap", "during", "--from-literal=b=2")
	run(kc, 0, "exec", "shell", "--", "echo", "exported")
	run(bob, 1, "delete", "configmap", "during") // Kubernetes refuses: a kube.request with 403
	for range 20 {
		run(kc, 0, "get", "configmap", "during", "-o", "name")
	}
	time.Sleep(5 * time.Second) // several failed attempts
	status, err := e.Limen(context.Background(), "", "", "proxy", "status", "--data-dir", e.ProxyDataDir())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(status, "Audit export webhook: delivered through event") || strings.Contains(status, "webhook: delivered through event 0, 0 behind") ||
		!strings.Contains(status, "oldest waiting since") || !strings.Contains(status, "oldest event kept:") {
		t.Fatalf("limen proxy status does not show the webhook's lag:\n%s", status)
	}
	if lag := scrapeGauge(t, metricsAddr, `limen_audit_export_lag{`, `limen_audit_sink="webhook"`); lag < 20 {
		t.Fatalf("limen_audit_export_lag for the webhook is %v with the receiver down, want at least 20", lag)
	}
	if items, posts := rcv.received(); posts != postsWhileUp || len(firstSeen(t, items)) == int(storedCount(t, e)) {
		t.Fatalf("the receiver is down, yet has %d posts (was %d)", posts, postsWhileUp)
	}

	// Back: everything arrives, in order, and later events after it.
	rcv.up()
	run(kc, 0, "delete", "configmap", "before")
	got := waitDelivered("receiver back")
	if lag := scrapeGauge(t, metricsAddr, `limen_audit_export_lag{`, `limen_audit_sink="webhook"`); lag != 0 {
		t.Errorf("limen_audit_export_lag is %v once everything is delivered", lag)
	}

	// Each stored event was exported as itself: same type and order.
	st, err := audit.Open(context.Background(), audit.Path(e.ProxyDataDir()), audit.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := st.EventsAfter(context.Background(), 0, len(got)+100)
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) < len(got) {
		t.Fatalf("%d events stored, %d received", len(stored), len(got))
	}
	types := map[string]int{}
	for i, ev := range got {
		if ev.Annotations[auditexport.AnnotationType] != string(stored[i].Type) {
			t.Fatalf("received event %d is a %s, stored %s", i+1, ev.Annotations[auditexport.AnnotationType], stored[i].Type)
		}
		types[string(stored[i].Type)]++
	}
	for _, typ := range []audit.Type{audit.TypeKubeRequest, audit.TypeKubeSent, audit.TypeSessionStart, audit.TypeSessionEnd, audit.TypeAuthLogin} {
		if types[string(typ)] == 0 {
			t.Errorf("no %s among the exported events %v", typ, types)
		}
	}
	checkKubeRequest(t, got, ns)

	// The file got the same events, each line strictly an audit Event. The
	// two sinks deliver on their own, so the file may still be catching up.
	var fromFile []auditv1.Event
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		fromFile = firstSeen(t, readJSONLines(t, exportFile))
		if len(fromFile) >= len(got) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the export file has %d events 30s after the webhook had %d", len(fromFile), len(got))
		}
	}
	for i := range got {
		if fromFile[i].AuditID != got[i].AuditID || fromFile[i].Stage != got[i].Stage {
			t.Fatalf("file event %d is %s/%s, webhook %s/%s", i+1, fromFile[i].AuditID, fromFile[i].Stage, got[i].AuditID, got[i].Stage)
		}
	}
	t.Logf("exported %d events (%v) through a receiver outage", len(got), types)
}

// checkKubeRequest finds alice's create of configmap "during" and checks
// the fields a SIEM reads.
func checkKubeRequest(t *testing.T, got []auditv1.Event, ns string) {
	t.Helper()
	for _, ev := range got {
		if ev.Stage != auditv1.StageResponseComplete || ev.Verb != "create" || ev.ObjectRef == nil || ev.ObjectRef.Resource != "configmaps" ||
			ev.ObjectRef.Namespace != ns || ev.ResponseStatus == nil || ev.ResponseStatus.Code != 201 {
			continue
		}
		if ev.User.Username != "alice" || ev.ImpersonatedUser == nil || ev.ImpersonatedUser.Username != "alice" ||
			!slices.Contains(ev.ImpersonatedUser.Groups, "limen:edit") {
			t.Errorf("user %+v impersonated %+v, want alice as alice with limen:edit", ev.User, ev.ImpersonatedUser)
		}
		if ev.RequestURI != "/api/v1/namespaces/"+ns+"/configmaps" || !strings.HasPrefix(ev.UserAgent, "kubectl") ||
			!slices.Equal(ev.SourceIPs, []string{"127.0.0.1"}) {
			t.Errorf("requestURI %q userAgent %q sourceIPs %v", ev.RequestURI, ev.UserAgent, ev.SourceIPs)
		}
		if ev.Annotations[auditexport.AnnotationCluster] != gatewaytest.ClusterName || ev.Annotations[auditexport.AnnotationClient] != "kubectl" ||
			len(ev.Annotations[auditexport.AnnotationSession]) != 32 || ev.Annotations[auditexport.AnnotationLogin] == "" {
			t.Errorf("annotations %v", ev.Annotations)
		}
		if ev.StageTimestamp.Before(&ev.RequestReceivedTimestamp) || ev.AuditID == "" {
			t.Errorf("timestamps %s → %s, auditID %q", ev.RequestReceivedTimestamp, ev.StageTimestamp, ev.AuditID)
		}
		return
	}
	t.Fatal("no exported kube.request for alice's create of a configmap")
}

func readJSONLines(t *testing.T, path string) []auditv1.Event {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []auditv1.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		e, err := auditexport.DecodeEvent(sc.Bytes())
		if err != nil {
			t.Fatalf("%s line %d: %v", path, n, err)
		}
		out = append(out, *e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// freeAddr is a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// scrapeGauge reads the value of the first sample of metric (name and
// opening brace) whose labels contain label.
func scrapeGauge(t *testing.T, addr, metric, label string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, metric) && strings.Contains(l, label) {
			f := strings.Fields(l)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", l, err)
			}
			return v
		}
	}
	t.Fatalf("no %s with %s in the metrics:\n%s", metric, label, b)
	return 0
}
