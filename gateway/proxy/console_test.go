package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"testing"

	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/sessions"
)

// A worker's live-view stream reaches the watcher only with the nonce the
// watcher asked with, for its session, from a worker of the session's
// cluster: a worker cannot push output into another cluster's live view.
func TestObserveStreamGoesOnlyToItsWatcher(t *testing.T) {
	info := sessions.Info{ID: "sess-1", Cluster: "demo"}
	for _, tc := range []struct {
		name      string
		from      string
		o         sessions.Observe
		delivered bool
	}{
		{"its worker", "demo", sessions.Observe{ID: "sess-1", Nonce: "n1"}, true},
		{"another cluster's worker", "prod", sessions.Observe{ID: "sess-1", Nonce: "n1"}, false},
		{"another nonce", "demo", sessions.Observe{ID: "sess-1", Nonce: "n2"}, false},
		{"another session", "demo", sessions.Observe{ID: "sess-2", Nonce: "n1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &consoleBridge{watchers: map[string]*watcher{}, reports: map[string]chan policy.Status{}, live: map[string]int{}}
			w := &watcher{info: info, stream: make(chan *observed, 1)}
			b.watchers["n1"] = w
			proxySide, workerSide := net.Pipe()
			defer proxySide.Close()
			done := make(chan struct{})
			go func() { defer close(done); b.receive(context.Background(), peer{cluster: tc.from}, proxySide) }()
			head, _ := json.Marshal(tc.o)
			go func() {
				_, _ = workerSide.Write(append(head, '\n'))
				_, _ = workerSide.Write([]byte("output\n"))
				_ = workerSide.Close()
			}()
			if !tc.delivered {
				<-done
				select {
				case <-w.stream:
					t.Fatal("the stream reached the watcher")
				default:
				}
				return
			}
			o := <-w.stream
			got, _ := io.ReadAll(o)
			o.Close()
			<-done
			if string(got) != "output\n" {
				t.Fatalf("the watcher read %q", got)
			}
		})
	}
}

// Live views hold worker streams that uploads need too: at most
// maxLiveViews per cluster at once, each slot given back once.
func TestLiveViewsPerClusterBounded(t *testing.T) {
	b := &consoleBridge{live: map[string]int{}}
	var releases []func()
	for range maxLiveViews {
		r, err := b.take("demo")
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, r)
	}
	if _, err := b.take("demo"); err == nil {
		t.Fatalf("live view %d of one cluster was allowed", maxLiveViews+1)
	}
	if r, err := b.take("prod"); err != nil {
		t.Fatalf("another cluster's live view: %v", err)
	} else {
		r()
	}
	releases[0]()
	releases[0]() // twice gives back one slot, not two
	if _, err := b.take("demo"); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := b.take("demo"); err == nil {
		t.Fatal("a double release gave back two slots")
	}
}
