package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/tunnel"
)

func TestKillPush(t *testing.T) {
	r := New(Config{Logger: slog.New(slog.DiscardHandler)})
	defer r.Close()
	target, _ := r.Register(context.Background(), sess("0123abcd", "alice"))
	other, _ := r.Register(context.Background(), sess("ffff", "alice"))

	m, err := KillMessage("0123abcd", "user:admin")
	if err != nil {
		t.Fatal(err)
	}
	m.ID = 9
	reply, err := r.HandleMessage(m)
	if err != nil {
		t.Fatal(err)
	}
	found, err := CheckKillAck(reply)
	if err != nil || !found || reply.ReplyTo != 9 {
		t.Fatalf("ack %+v: found=%v err=%v", reply, found, err)
	}
	waitDone(t, target)
	if target.Ended().Reason != ReasonKilled || other.Ended() != nil {
		t.Fatal("kill push ended the wrong sessions")
	}
	reply, _ = r.HandleMessage(m)
	if found, err := CheckKillAck(reply); err != nil || found {
		t.Fatalf("second kill: found=%v err=%v", found, err)
	}
	if _, err := KillMessage("../x", ""); err == nil {
		t.Fatal("KillMessage accepted a bad id")
	}
}

// TestShutdownPush: a stopping proxy's push ends the session with reason
// shutdown, whose words say so.
func TestShutdownPush(t *testing.T) {
	r := New(Config{Logger: slog.New(slog.DiscardHandler)})
	defer r.Close()
	target, _ := r.Register(context.Background(), sess("0123abcd", "alice"))
	m, err := ShutdownMessage("0123abcd")
	if err != nil {
		t.Fatal(err)
	}
	reply, err := r.HandleMessage(m)
	if found, aerr := CheckKillAck(reply); err != nil || aerr != nil || !found {
		t.Fatalf("shutdown push: found=%v err=%v %v", found, err, aerr)
	}
	waitDone(t, target)
	if e := target.Ended(); e.Reason != ReasonShutdown || !strings.Contains(e.Error(), "shutting down") {
		t.Fatalf("ended %+v (%q), want shutdown in words", e, e.Error())
	}
}

func TestKillPushRejects(t *testing.T) {
	tests := []struct {
		name, typ, body string
	}{
		{"no body", TypeKill, ""},
		{"not JSON", TypeKill, "["},
		{"no id", TypeKill, `{}`},
		{"bad id", TypeKill, `{"id":"a/b"}`},
		{"long id", TypeKill, `{"id":"` + strings.Repeat("a", MaxIDLen+1) + `"}`},
		{"id not string", TypeKill, `{"id":5}`},
		{"wrong type", "session.other", `{"id":"a"}`},
		{"unknown reason", TypeKill, `{"id":"a","reason":"locked"}`},
		{"reason not string", TypeKill, `{"id":"a","reason":1}`},
	}
	r := New(Config{Logger: slog.New(slog.DiscardHandler)})
	defer r.Close()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reply, err := r.HandleMessage(tunnel.Message{Type: tt.typ, ID: 3, Body: json.RawMessage(tt.body)})
			if !errors.Is(err, tunnel.ErrBadMessage) {
				t.Fatalf("err %v, want ErrBadMessage", err)
			}
			if _, err := CheckKillAck(reply); err == nil {
				t.Fatal("reply does not carry the error")
			}
		})
	}
	if _, err := CheckKillAck(tunnel.Message{Type: TypeKill}); err == nil {
		t.Fatal("CheckKillAck accepted a non-ack")
	}
}

func FuzzDecodeKill(f *testing.F) {
	f.Add(`{"id":"0123abcd","by":"user:admin"}`)
	f.Add(`{"id":""}`)
	f.Add(`{"id":"a\u0000b"}`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, body string) {
		k, err := DecodeKill(tunnel.Message{Type: TypeKill, Body: json.RawMessage(body)})
		if err == nil && ValidID(k.ID) != nil {
			t.Fatalf("accepted bad id %q", k.ID)
		}
		if err == nil && k.Reason != ReasonKilled && k.Reason != ReasonShutdown {
			t.Fatalf("accepted reason %q", k.Reason)
		}
	})
}
