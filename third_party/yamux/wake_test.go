// This file is Limen's, added to yamux v0.1.2 (see LIMEN.md); it is under
// the same license as the rest of this directory (MPL-2.0).

package yamux

import (
	"testing"
	"time"
)

// pair opens a stream from the client and accepts it on the server, with a
// first byte sent so that the server learns of it.
func pair(t *testing.T) (client, server *Session, c, s *Stream) {
	t.Helper()
	client, server = testClientServer(t)
	c, err := client.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if s, err = server.AcceptStream(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	return client, server, c, s
}

func woke(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-time.After(5 * time.Second):
		return false
	}
}

func TestOnWake(t *testing.T) {
	for name, tc := range map[string]func(client, server *Session, c, s *Stream){
		"data from the peer":     func(_, _ *Session, c, _ *Stream) { _, _ = c.Write([]byte("y")) },
		"the peer's FIN":         func(_, _ *Session, c, _ *Stream) { _ = c.Close() },
		"the peer's RST":         func(_, _ *Session, c, _ *Stream) { c.closeTimeout() }, // closeTimeout sends one
		"the session ends":       func(_, server *Session, _, _ *Stream) { _ = server.Close() },
		"the peer's session":     func(client, _ *Session, _, _ *Stream) { _ = client.Close() },
		"the stream closed here": func(_, _ *Session, _, s *Stream) { _ = s.Close() },
	} {
		t.Run(name, func(t *testing.T) {
			client, server, c, s := pair(t)
			ran := make(chan struct{})
			stop := s.OnWake(func() { close(ran) })
			select {
			case <-ran:
				t.Fatal("ran before anything happened")
			case <-time.After(50 * time.Millisecond):
			}
			tc(client, server, c, s)
			if !woke(ran) {
				t.Fatal("did not run")
			}
			if stop() {
				t.Error("stop after it ran reported that it stopped it")
			}
		})
	}
}

func TestOnWakeAtOnce(t *testing.T) {
	_, _, c, s := pair(t)
	if _, err := c.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.woken() == false && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	ran := make(chan struct{})
	s.OnWake(func() { close(ran) })
	if !woke(ran) {
		t.Fatal("data already unread, yet it did not run")
	}
}

func TestOnWakeStopped(t *testing.T) {
	_, _, c, s := pair(t)
	ran := make(chan struct{}, 1)
	stop := s.OnWake(func() { ran <- struct{}{} })
	if !stop() {
		t.Fatal("stop before anything happened reported that f had run")
	}
	_ = c.Close()
	select {
	case <-ran:
		t.Fatal("ran after stop")
	case <-time.After(100 * time.Millisecond):
	}
	// A later OnWake still works, once.
	again := make(chan struct{})
	s.OnWake(func() { close(again) })
	if !woke(again) {
		t.Fatal("an OnWake after the FIN did not run at once")
	}
}
