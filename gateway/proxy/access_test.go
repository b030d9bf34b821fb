package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/grant"
	"github.com/limenhq/limen/gateway/proxy"
)

// A cluster name that is a path would put the rules review — a POST with
// the user's groups — on another path of the cluster (issue #30, item 2):
// Access refuses it before anything is signed or sent, so the worker sees
// nothing and no kube.sent is stored.
func TestAccessRefusesAClusterThatIsAPath(t *testing.T) {
	for _, cluster := range []string{
		"demo/api/v1/namespaces/default/configmaps?x=",
		"demo/api/v1/namespaces/default/services/web:80/proxy/x?y=",
		"demo?x=",
		"demo#",
		"../demo",
		"Demo",
		"",
		strings.Repeat("a", 64),
	} {
		t.Run(cluster, func(t *testing.T) {
			f, w := newFront(t), newReviewWorker(0)
			f.kube.Tunnel = w
			_, err := f.kube.Access(context.Background(), alice, time.Now().Add(time.Hour), cluster, "default")
			if !errors.Is(err, proxy.ErrAccessInput) {
				t.Errorf("Access on cluster %q: %v, want ErrAccessInput", cluster, err)
			}
			select {
			case req := <-w.got:
				t.Errorf("the worker received %s %s", req.Method, req.URL)
			default:
			}
			if evs := f.events(t, audit.TypeKubeSent); len(evs) != 0 {
				t.Errorf("kube.sent stored for cluster %q: %s %s", cluster, evs[0].Kube.Method, evs[0].Kube.Path)
			}
		})
	}
	// The honest name still reaches the worker, with the review only.
	f, w := newFront(t), newReviewWorker(0)
	f.kube.Tunnel = w
	if _, err := f.kube.Access(context.Background(), alice, time.Now().Add(time.Hour), "demo", "default"); err != nil {
		t.Fatalf("Access on cluster demo: %v", err)
	}
	select {
	case req := <-w.got:
		if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/selfsubjectrulesreviews") || req.URL.RawQuery != "" {
			t.Fatalf("the review went to %s %s", req.Method, req.URL)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the review of cluster demo never reached the worker")
	}
	for _, ev := range f.events(t, audit.TypeKubeSent) {
		if ev.Kube.Resource != "selfsubjectrulesreviews" {
			t.Fatalf("kube.sent for %s, want only selfsubjectrulesreviews", ev.Kube.Path)
		}
	}
}

// reviewWorker is a stand-in worker (the real API server's answer cannot
// be made this large on demand) that reads the request whole, hands it to
// got, and answers with a valid SelfSubjectRulesReview of about size bytes.
type reviewWorker struct {
	size int
	got  chan *http.Request
}

func newReviewWorker(size int) *reviewWorker {
	return &reviewWorker{size: size, got: make(chan *http.Request, 4)}
}

func (w *reviewWorker) Open(_ context.Context, cluster string) (net.Conn, error) {
	client, server := net.Pipe()
	go func() {
		defer server.Close()
		br := bufio.NewReader(server)
		if _, err := grant.ReadPreamble(br, grant.MaxTokenSize); err != nil {
			return
		}
		preq, err := grant.ReadRequest(br)
		if err != nil {
			return
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		select {
		case w.got <- req:
		default:
		}
		var rules []authorizationv1.ResourceRule
		for n := 0; n < w.size; n += 64 {
			rules = append(rules, authorizationv1.ResourceRule{Verbs: []string{"get"}, APIGroups: []string{""},
				Resources: []string{fmt.Sprintf("r%040d", n)}})
		}
		body, _ := json.Marshal(authorizationv1.SelfSubjectRulesReview{Status: authorizationv1.SubjectRulesReviewStatus{ResourceRules: rules}})
		ev := audit.Event{Type: audit.TypeKubeRequest, Time: time.Now(), Principal: alice, Cluster: cluster, SessionID: preq.SessionID,
			Kube: &audit.KubeRequest{Method: "POST", Path: "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", Status: 201}}
		if audit.WriteEvent(server, ev) != nil {
			return
		}
		fmt.Fprintf(server, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
		_, _ = server.Write(body)
	}()
	return client, nil
}

// The review's answer is read up to proxy.MaxReviewAnswer: a larger one is
// an error that says so, not a buffer that grows with what the cluster
// sends. The context is a served request's, as the console's is, so that
// the relay's abort of the cut answer (http.ErrAbortHandler) is tried too:
// it must stay inside Access.
func TestAccessCapsTheReviewAnswer(t *testing.T) {
	ctx := context.WithValue(context.Background(), http.ServerContextKey, &http.Server{})
	for _, tc := range []struct {
		size int
		ok   bool
	}{{64 << 10, true}, {proxy.MaxReviewAnswer + 1<<20, false}} {
		f := newFront(t)
		f.kube.Tunnel = newReviewWorker(tc.size)
		rep, err := f.kube.Access(ctx, alice, time.Now().Add(time.Hour), "demo", "default")
		switch {
		case tc.ok && err != nil:
			t.Fatalf("an answer of %d bytes: %v", tc.size, err)
		case tc.ok && len(rep.Rows) == 0:
			t.Fatalf("an answer of %d bytes gave no report", tc.size)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), "larger than")):
			t.Fatalf("an answer of %d bytes: %v, want an error saying it is larger than the limit", tc.size, err)
		}
	}
}
