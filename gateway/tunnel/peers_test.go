package tunnel

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestDecodePeers(t *testing.T) {
	many := make([]string, MaxPeers+1)
	for i := range many {
		many[i] = fmt.Sprintf(`{"id":"p%d","addr":"10.0.0.%d:443"}`, i, i%250+1)
	}
	for _, tt := range []struct {
		name, body string
		want       []string // addresses, in order; nil with wantErr
		wantErr    bool
	}{
		{"empty list", `{"rev":1,"peers":[]}`, []string{}, false},
		{"no peers key", `{"rev":1}`, []string{}, false},
		{"sorted and deduplicated", `{"rev":2,"peers":[{"id":"b","addr":"b.example:443"},{"id":"a","addr":"a.example:443"},{"id":"a2","addr":"a.example:443"}]}`,
			[]string{"a.example:443", "b.example:443"}, false},
		{"ipv4", `{"peers":[{"id":"x","addr":"127.0.0.1:8443"}]}`, []string{"127.0.0.1:8443"}, false},
		{"ipv6", `{"peers":[{"id":"x","addr":"[::1]:8443"}]}`, []string{"[::1]:8443"}, false},
		{"trailing dot name", `{"peers":[{"id":"x","addr":"proxy.example.:1"}]}`, []string{"proxy.example.:1"}, false},
		{"exactly MaxPeers", `{"peers":[` + strings.Join(many[:MaxPeers], ",") + `]}`, nil, false},

		{"too many peers", `{"peers":[` + strings.Join(many, ",") + `]}`, nil, true},
		{"not json", `peers`, nil, true},
		{"no body", ``, nil, true},
		{"peers not a list", `{"peers":"a:1"}`, nil, true},
		{"negative rev", `{"rev":-1}`, nil, true},
		{"empty address", `{"peers":[{"id":"x","addr":""}]}`, nil, true},
		{"no port", `{"peers":[{"id":"x","addr":"proxy.example"}]}`, nil, true},
		{"port zero", `{"peers":[{"id":"x","addr":"proxy.example:0"}]}`, nil, true},
		{"port too big", `{"peers":[{"id":"x","addr":"proxy.example:65536"}]}`, nil, true},
		{"port with sign", `{"peers":[{"id":"x","addr":"proxy.example:+443"}]}`, nil, true},
		{"port leading zero", `{"peers":[{"id":"x","addr":"proxy.example:0443"}]}`, nil, true},
		{"port named", `{"peers":[{"id":"x","addr":"proxy.example:https"}]}`, nil, true},
		{"url not address", `{"peers":[{"id":"x","addr":"https://proxy.example:443"}]}`, nil, true},
		{"path in host", `{"peers":[{"id":"x","addr":"proxy.example/x:443"}]}`, nil, true},
		{"userinfo", `{"peers":[{"id":"x","addr":"u@proxy.example:443"}]}`, nil, true},
		{"empty host", `{"peers":[{"id":"x","addr":":443"}]}`, nil, true},
		{"underscore", `{"peers":[{"id":"x","addr":"pro_xy:443"}]}`, nil, true},
		{"label hyphen", `{"peers":[{"id":"x","addr":"-proxy:443"}]}`, nil, true},
		{"empty label", `{"peers":[{"id":"x","addr":"a..b:443"}]}`, nil, true},
		{"long label", `{"peers":[{"id":"x","addr":"` + strings.Repeat("a", 64) + `:443"}]}`, nil, true},
		{"long name", `{"peers":[{"id":"x","addr":"` + strings.Repeat("a.", 130) + `a:443"}]}`, nil, true},
		{"ipv6 zone", `{"peers":[{"id":"x","addr":"[fe80::1%eth0]:443"}]}`, nil, true},
		{"control byte in host", `{"peers":[{"id":"x","addr":"a\u0000b:443"}]}`, nil, true},
		{"newline in id", `{"peers":[{"id":"a\nb","addr":"a:443"}]}`, nil, true},
		{"long id", `{"peers":[{"id":"` + strings.Repeat("i", maxPeerID+1) + `","addr":"a:443"}]}`, nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := Message{Type: TypePeers}
			if tt.body != "" {
				m.Body = []byte(tt.body)
			}
			l, err := DecodePeers(m)
			if tt.wantErr {
				if !errors.Is(err, ErrBadMessage) {
					t.Fatalf("DecodePeers = %+v, %v; want ErrBadMessage", l, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == nil {
				return
			}
			got := []string{}
			for _, p := range l.Peers {
				got = append(got, p.Addr)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("addresses %v, want %v", got, tt.want)
			}
		})
	}
	if _, err := DecodePeers(Message{Type: "lock.set", Body: []byte(`{}`)}); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("another type decoded: %v", err)
	}
}

// FuzzDecodePeers: whatever a proxy sends, DecodePeers returns either an
// error or a list the worker may dial: bounded, valid, sorted, unique.
func FuzzDecodePeers(f *testing.F) {
	f.Add([]byte(`{"rev":1,"peers":[{"id":"a","addr":"a.example:443"},{"id":"b","addr":"[::1]:1"}]}`))
	f.Add([]byte(`{"peers":[{"id":"a","addr":"1.2.3.4:65535"},{"id":"a","addr":"1.2.3.4:65535"}]}`))
	f.Add([]byte(`{"peers":null}`))
	f.Add([]byte(`{"peers":[{"addr":"x:0"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		l, err := DecodePeers(Message{Type: TypePeers, Body: body})
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error %v does not wrap ErrBadMessage", err)
			}
			return
		}
		if len(l.Peers) > MaxPeers {
			t.Fatalf("%d peers", len(l.Peers))
		}
		for i, p := range l.Peers {
			if err := ValidPeerAddr(p.Addr); err != nil {
				t.Fatalf("peer %d accepted with %v", i, err)
			}
			if i > 0 && l.Peers[i-1].Addr >= p.Addr {
				t.Fatalf("not sorted and unique: %q then %q", l.Peers[i-1].Addr, p.Addr)
			}
		}
		// What was accepted encodes again: the proxy side builds the same.
		if _, err := NewPeersMessage(l); err != nil {
			t.Fatalf("accepted list does not encode: %v", err)
		}
	})
}

func TestMemPeersTTL(t *testing.T) {
	now := time.Unix(1000, 0)
	m := &MemPeers{TTL: 3 * time.Second, Now: func() time.Time { return now }}
	ctx := context.Background()
	if err := m.Heartbeat(ctx, Peer{}); err == nil {
		t.Fatal("heartbeat without id accepted")
	}
	_ = m.Heartbeat(ctx, Peer{ID: "b", Addr: "b:1"})
	now = now.Add(2 * time.Second)
	_ = m.Heartbeat(ctx, Peer{ID: "a", Addr: "a:1"})
	if live, _ := m.Live(ctx); fmt.Sprint(live) != "[{a a:1} {b b:1}]" {
		t.Fatalf("live %v", live)
	}
	now = now.Add(1500 * time.Millisecond) // b beat 3.5 s ago
	if live, _ := m.Live(ctx); fmt.Sprint(live) != "[{a a:1}]" {
		t.Fatalf("after b's TTL: live %v", live)
	}
}

// failingPeers is a store that cannot be reached.
type failingPeers struct{}

func (failingPeers) Heartbeat(context.Context, Peer) error { return errors.New("store down") }
func (failingPeers) Live(context.Context) ([]Peer, error)  { return nil, errors.New("store down") }

func TestAnnouncerReady(t *testing.T) {
	a := &Announcer{Peers: &MemPeers{}, Self: Peer{ID: "p1", Addr: "127.0.0.1:1"}, Stale: time.Hour}
	if a.Ready() == nil {
		t.Fatal("ready before the first heartbeat")
	}
	a.beat(context.Background())
	if err := a.Ready(); err != nil {
		t.Fatalf("not ready after a heartbeat: %v", err)
	}
	if l := a.List(); l.Rev != 1 || len(l.Peers) != 1 || l.Peers[0].ID != "p1" {
		t.Fatalf("list %+v", l)
	}
	a.beat(context.Background())
	if l := a.List(); l.Rev != 1 {
		t.Fatalf("unchanged list got a new rev: %+v", l)
	}

	down := &Announcer{Peers: failingPeers{}, Self: Peer{ID: "p1"}}
	down.beat(context.Background())
	if err := down.Ready(); err == nil || !strings.Contains(err.Error(), "store down") {
		t.Fatalf("ready with an unreachable store: %v", err)
	}
	// A proxy with no address to advertise still beats, and lists nobody.
	quiet := &Announcer{Peers: &MemPeers{}, Self: Peer{ID: "p2"}}
	quiet.beat(context.Background())
	if l := quiet.List(); quiet.Ready() != nil || len(l.Peers) != 0 || l.Rev != 1 {
		t.Fatalf("no-address proxy: list %+v, ready %v", l, quiet.Ready())
	}
}
