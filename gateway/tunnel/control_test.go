package tunnel

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// controlPair runs two control ends over net.Pipe; handlers see the other
// side's messages. Cleanup stops both and waits for their loops.
func controlPair(t *testing.T, timing Timing, ha, hb func(context.Context, Message)) (a, b *control, errA, errB <-chan error) {
	t.Helper()
	ca, cb := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	a = newControl(ca, timing, logger(nil), func() { _ = ca.Close() })
	b = newControl(cb, timing, logger(nil), func() { _ = cb.Close() })
	ea, eb := make(chan error, 1), make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() { ea <- a.run(ctx, ha) })
	wg.Go(func() { eb <- b.run(ctx, hb) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return a, b, ea, eb
}

func TestControlRequestReply(t *testing.T) {
	checkGoroutines(t)
	timing := Timing{Heartbeat: time.Hour, PeerTimeout: time.Hour}
	var b *control
	got := make(chan Message, 4)
	a, b, _, _ := controlPair(t, timing, func(_ context.Context, m Message) { got <- m },
		func(ctx context.Context, m Message) {
			switch m.Type {
			case "echo":
				r, _ := m.Reply("echoed", nil)
				r.Body = m.Body
				_, _ = b.send(ctx, r)
			case "stray":
				// A reply to nothing outstanding is dropped, not delivered.
				_, _ = b.send(ctx, Message{Type: "late", ReplyTo: 999})
				_, _ = b.send(ctx, Message{Type: "after-stray"})
			}
		})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	r, err := a.request(ctx, Message{Type: "echo", Body: []byte(`"x"`)})
	if err != nil || r.Type != "echoed" || string(r.Body) != `"x"` || r.ReplyTo == 0 {
		t.Fatalf("request = %+v, %v", r, err)
	}
	if _, err := a.send(ctx, Message{Type: "stray"}); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, got); m.Type != "after-stray" {
		t.Fatalf("got %q; the stray reply leaked to OnMessage", m.Type)
	}

	// No answer: the request ends with its context and forgets the slot.
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if _, err := a.request(short, Message{Type: "ignored"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unanswered request err = %v", err)
	}
	a.mu.Lock()
	n := len(a.pending)
	a.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d pending requests left", n)
	}
	if _, err := a.send(ctx, Message{}); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("send without type err = %v", err)
	}
}

// TestControlHeartbeatsKeepAlive: with heartbeats well inside the peer
// timeout, an otherwise idle control stream outlives the timeout several
// times over; the silent-peer tests show the timeout does fire without them.
func TestControlHeartbeatsKeepAlive(t *testing.T) {
	checkGoroutines(t)
	// Many heartbeats fit in one PeerTimeout, so only a stall longer than
	// 1.5 s (the whole test binary descheduled) could end a side; 500 ms
	// did under a loaded CI machine.
	timing := Timing{Heartbeat: 10 * time.Millisecond, PeerTimeout: 1500 * time.Millisecond}
	_, _, errA, errB := controlPair(t, timing, nil, nil)
	select {
	case err := <-errA:
		t.Fatalf("side a ended: %v", err)
	case err := <-errB:
		t.Fatalf("side b ended: %v", err)
	case <-time.After(3 * timing.PeerTimeout):
	}
}

func TestControlClosed(t *testing.T) {
	checkGoroutines(t)
	timing := Timing{Heartbeat: time.Hour, PeerTimeout: time.Hour}
	a, b, errA, _ := controlPair(t, timing, nil, nil)
	_ = b.conn.Close()
	select {
	case <-errA:
	case <-time.After(wait):
		t.Fatal("control loop did not end when the peer went away")
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := a.send(ctx, Message{Type: "x"}); !errors.Is(err, ErrTunnelClosed) {
		t.Fatalf("send after close err = %v", err)
	}
	if _, err := a.request(ctx, Message{Type: "x"}); !errors.Is(err, ErrTunnelClosed) {
		t.Fatalf("request after close err = %v", err)
	}
}

// TestControlSendCancelledMidWrite: a send whose context ends while the
// peer is not reading must return, and it breaks the stream, since part of
// a frame may be out.
func TestControlSendCancelledMidWrite(t *testing.T) {
	checkGoroutines(t)
	ca, cb := net.Pipe() // unbuffered: nobody reads cb, so writes block
	defer cb.Close()
	broken := make(chan struct{})
	c := newControl(ca, Timing{}.withDefaults(), logger(nil), func() { _ = ca.Close(); close(broken) })
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := c.send(ctx, Message{Type: "lock.set"}); errc <- err }()
	time.Sleep(20 * time.Millisecond) // let the write block; the assertion does not depend on it
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(wait):
		t.Fatal("send ignored its context")
	}
	select {
	case <-broken:
	case <-time.After(wait):
		t.Fatal("interrupted send did not break the stream")
	}
}
