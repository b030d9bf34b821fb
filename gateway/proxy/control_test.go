package proxy

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/tunnel"
)

// peer stands in for one worker's control stream (tunnel.Worker), so that
// routing is tested without TLS; new_test.go runs the real tunnel.
type peer struct{ cluster string }

func (p peer) Info() tunnel.WorkerInfo { return tunnel.WorkerInfo{Cluster: p.cluster} }
func (peer) Send(context.Context, tunnel.Message) error {
	return errors.New("not used")
}
func (peer) Request(context.Context, tunnel.Message) (tunnel.Message, error) {
	return tunnel.Message{}, errors.New("not used")
}

// TestWorkerRouter: a message reaches the one handler registered for its
// type, with the worker it came from; a type nobody registered reaches no
// handler and is logged; connect hooks run in order and the first error
// stops them and drops the worker.
func TestWorkerRouter(t *testing.T) {
	var logs bytes.Buffer
	r := newWorkerRouter(slog.New(slog.NewTextHandler(&logs, nil)))
	var got []string
	r.handle("a", func(_ context.Context, w workerConn, m tunnel.Message) { got = append(got, "a:"+w.Info().Cluster) })
	r.handle("b", func(_ context.Context, w workerConn, m tunnel.Message) { got = append(got, "b:"+w.Info().Cluster) })
	for _, typ := range []string{"b", "a", "c"} {
		m, err := tunnel.NewMessage(typ, struct{}{})
		if err != nil {
			t.Fatal(err)
		}
		r.route(context.Background(), peer{"demo"}, m)
	}
	if strings.Join(got, ",") != "b:demo,a:demo" {
		t.Fatalf("handled %q, want b:demo,a:demo", got)
	}
	if !strings.Contains(logs.String(), "unknown control message from worker") || !strings.Contains(logs.String(), "type=c") {
		t.Fatalf("the unknown type was not logged: %s", logs.String())
	}

	var ran []int
	r.connect(func(context.Context, workerConn) error { ran = append(ran, 1); return nil })
	r.connect(func(context.Context, workerConn) error { ran = append(ran, 2); return errors.New("lock list refused") })
	r.connect(func(context.Context, workerConn) error { ran = append(ran, 3); return nil })
	if err := r.connected(context.Background(), peer{"demo"}); err == nil || err.Error() != "lock list refused" {
		t.Fatalf("connected: %v, want the hook's error", err)
	}
	if len(ran) != 2 || ran[0] != 1 || ran[1] != 2 {
		t.Fatalf("connect hooks ran %v, want [1 2]", ran)
	}
}
