package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/tunnel"
)

// flakyTunnel stands in for a tunnel that reconnects: its first down
// requests fail as the real Client fails while no session is up, then it
// answers with ack. A real tunnel cannot be held down for an exact number
// of attempts.
type flakyTunnel struct {
	down  int
	err   error // what a down request returns
	ack   audit.EventAck
	calls int
	got   []tunnel.Message
}

func (f *flakyTunnel) Request(_ context.Context, m tunnel.Message) (tunnel.Message, error) {
	f.calls++
	f.got = append(f.got, m)
	if f.calls <= f.down {
		return tunnel.Message{}, f.err
	}
	return m.Reply(audit.MsgEventAck, f.ack)
}

func testEvent() audit.Event {
	return audit.Event{Type: audit.TypeSessionStart, Time: time.Now(), Principal: identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "alice"},
		Cluster: "demo", SessionID: "s1", Session: &audit.Session{Kind: "kube", Login: "exec"}}
}

func TestEventRelay(t *testing.T) {
	tests := []struct {
		name      string
		tunnel    flakyTunnel
		cancelled bool   // ctx already ended
		want      string // error substring, "" for delivered
		calls     int
	}{
		{name: "delivered", calls: 1},
		{name: "retried while not connected", tunnel: flakyTunnel{down: 3, err: tunnel.ErrNotConnected}, calls: 4},
		{name: "retried while the tunnel closes", tunnel: flakyTunnel{down: 2, err: fmt.Errorf("request: %w", tunnel.ErrTunnelClosed)}, calls: 3},
		{name: "proxy did not store", tunnel: flakyTunnel{ack: audit.EventAck{Error: "audit store full"}},
			want: "proxy did not store the event: audit store full", calls: 1},
		{name: "other failure is not retried", tunnel: flakyTunnel{down: 5, err: errors.New("frame too large")},
			want: "frame too large", calls: 1},
		{name: "gives up when ctx ends", tunnel: flakyTunnel{down: 1 << 30, err: tunnel.ErrNotConnected}, cancelled: true,
			want: "audit event not delivered", calls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancelled {
				cancel()
			}
			r := &EventRelay{Tunnel: &tt.tunnel, Retry: time.Millisecond}
			err := r.Send(ctx, testEvent())
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Send: %v, want delivered", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Send: %v, want an error containing %q", err, tt.want)
			}
			if tt.tunnel.calls != tt.calls {
				t.Fatalf("%d attempts, want %d", tt.tunnel.calls, tt.calls)
			}
			for _, m := range tt.tunnel.got {
				var ev audit.Event
				if m.Type != audit.MsgEvent || m.Decode(&ev) != nil || ev.SessionID != "s1" {
					t.Fatalf("sent %s %s, want the event as %s", m.Type, m.Body, audit.MsgEvent)
				}
			}
		})
	}
}

// replies records what the worker sends back on the control stream.
type replies chan tunnel.Message

func (r replies) Send(_ context.Context, m tunnel.Message) error { r <- m; return nil }

func (r replies) next(t *testing.T) tunnel.Message {
	t.Helper()
	select {
	case m := <-r:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no reply sent to the proxy")
		return tunnel.Message{}
	}
}

// TestProxyRouter: each push from the proxy reaches the feature registered
// for its type and is acknowledged; a type nobody registered changes nothing
// and gets no reply.
func TestProxyRouter(t *testing.T) {
	ctx := context.Background()
	set := locks.NewSet()
	reg := sessions.New(sessions.Config{Locks: set, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer reg.Close()
	out := make(replies, 4)
	r := newProxyRouter(slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.handleLocks(out, set, reg)
	alice := identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "alice"}
	bob := identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "bob"}

	list, err := locks.ListMessage([]locks.Lock{{Target: locks.TargetOf(alice), Reason: "incident 7", CreatedBy: "user:admin", CreatedAt: time.Now()}})
	if err != nil {
		t.Fatal(err)
	}
	r.onMessage(ctx, list)
	if err := locks.CheckAck(out.next(t)); err != nil {
		t.Fatalf("lock list ack: %v", err)
	}
	if err := set.Check(alice, time.Now()); err == nil {
		t.Fatal("the pushed lock list did not lock alice")
	}

	live, err := reg.Track(ctx, sessions.Session{ID: "s-bob", Principal: bob, Cluster: "demo", Kind: sessions.KindExec, Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	kill, err := sessions.KillMessage("s-bob", "user:admin")
	if err != nil {
		t.Fatal(err)
	}
	r.onMessage(ctx, kill)
	var ack sessions.KillAck
	if m := out.next(t); m.Type != sessions.TypeKillAck || m.Decode(&ack) != nil || !ack.Found {
		t.Fatalf("kill reply %s %s, want %s found", m.Type, m.Body, sessions.TypeKillAck)
	}
	select {
	case <-live.Context().Done():
	default:
		t.Fatal("the killed session is still live")
	}

	unknown, err := tunnel.NewMessage("lock.everything", struct{}{})
	if err != nil {
		t.Fatal(err)
	}
	r.onMessage(ctx, unknown)
	if err := set.Check(bob, time.Now()); err != nil {
		t.Fatalf("an unknown message changed the locks: %v", err)
	}
	select {
	case m := <-out:
		t.Fatalf("an unknown message was answered with %s", m.Type)
	default:
	}
}

// refusingTunnel stands in for a proxy whose audit store refuses the
// first refuse events (a full disk, which a unit test cannot make), then
// stores them; it counts what it stored by type. Safe for the relay's
// background delivery.
type refusingTunnel struct {
	mu     sync.Mutex
	refuse int
	stored map[audit.Type]int
}

func (f *refusingTunnel) Request(_ context.Context, m tunnel.Message) (tunnel.Message, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse > 0 {
		f.refuse--
		return m.Reply(audit.MsgEventAck, audit.EventAck{Error: "audit trail unavailable: disk full"})
	}
	var ev audit.Event
	if err := m.Decode(&ev); err != nil {
		return tunnel.Message{}, err
	}
	f.stored[ev.Type]++
	return m.Reply(audit.MsgEventAck, audit.EventAck{})
}

func (f *refusingTunnel) count(typ audit.Type) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stored[typ]
}

// TestEventRelayDeliversSessionEndLater: a session.end the proxy did not
// store (its audit trail full) is still reported as not stored, and is
// delivered again in the background until stored, exactly once; a
// session.start is not (its stream was refused instead). Without it, a
// stream that ended while the audit trail was full never has a session.end
// (test/faults TestDiskFull/audit found it).
func TestEventRelayDeliversSessionEndLater(t *testing.T) {
	tun := &refusingTunnel{refuse: 5, stored: map[audit.Type]int{}}
	r := &EventRelay{Tunnel: tun, Retry: time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	start := testEvent()
	if err := r.Send(ctx, start); err == nil {
		t.Fatal("session.start refused by the proxy: Send returned nil")
	}
	end := testEvent()
	end.Type = audit.TypeSessionEnd
	if err := r.Send(ctx, end); err == nil || !strings.Contains(err.Error(), "did not store") {
		t.Fatalf("session.end refused by the proxy: Send returned %v, want the refusal", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for tun.count(audit.TypeSessionEnd) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the refused session.end was never delivered again")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if n, s := tun.count(audit.TypeSessionEnd), tun.count(audit.TypeSessionStart); n != 1 || s != 0 {
		t.Fatalf("stored %d session.end and %d session.start, want 1 and 0", n, s)
	}
}
