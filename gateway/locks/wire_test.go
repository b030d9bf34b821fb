package locks

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/tunnel"
)

func TestWireRoundTrip(t *testing.T) {
	s := NewSet()
	expiring := testLock("bob")
	expiring.CreatedAt = time.Now()
	expiring.Expires = time.Now().Add(time.Hour)
	list, err := ListMessage([]Lock{testLock("alice"), expiring})
	if err != nil {
		t.Fatal(err)
	}
	set, _ := ChangeMessage(Change{Op: OpSet, Lock: testLock("carol")})
	remove, _ := ChangeMessage(Change{Op: OpRemove, Lock: Lock{Target: TargetOf(user("alice"))}})
	steps := []struct {
		m      tunnel.Message
		locked []string
	}{
		{list, []string{"alice", "bob"}},
		{set, []string{"alice", "bob", "carol"}},
		{remove, []string{"bob", "carol"}},
	}
	for i, st := range steps {
		st.m.ID = uint64(i + 1)
		reply, err := s.HandleMessage(st.m)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if reply.ReplyTo != st.m.ID || CheckAck(reply) != nil {
			t.Fatalf("step %d: bad ack %+v", i, reply)
		}
		if got := len(s.List(time.Now())); got != len(st.locked) {
			t.Fatalf("step %d: %d locks, want %v", i, got, st.locked)
		}
		for _, n := range st.locked {
			if _, ok := s.Locked(user(n), time.Now()); !ok {
				t.Fatalf("step %d: %s not locked", i, n)
			}
		}
	}
	if l, _ := s.Locked(user("bob"), time.Now()); !l.Expires.Equal(expiring.Expires) {
		t.Fatalf("expiry lost in transit: %v", l.Expires)
	}
	empty, _ := ListMessage(nil)
	if _, err := s.HandleMessage(empty); err != nil || len(s.List(time.Now())) != 0 {
		t.Fatalf("empty list did not clear the set: %v", err)
	}
}

func TestWireRejects(t *testing.T) {
	raw := func(typ, body string) tunnel.Message {
		return tunnel.Message{Type: typ, ID: 7, Body: json.RawMessage(body)}
	}
	good, _ := json.Marshal(testLock("alice"))
	tests := []struct {
		name string
		m    tunnel.Message
	}{
		{"list without body", raw(TypeList, "")},
		{"list not JSON", raw(TypeList, "{")},
		{"list with invalid lock", raw(TypeList, `{"locks":[{"target":{"kind":"user","name":""}}]}`)},
		{"list locks not an array", raw(TypeList, `{"locks":{}}`)},
		{"set without reason", raw(TypeSet, `{"target":{"kind":"user","name":"a"},"created_by":"x","created_at":"2030-01-01T00:00:00Z"}`)},
		{"set bad kind", raw(TypeSet, `{"target":{"kind":"robot","name":"a"},"reason":"r","created_by":"x","created_at":"2030-01-01T00:00:00Z"}`)},
		{"set bad time", raw(TypeSet, `{"target":{"kind":"user","name":"a"},"reason":"r","created_by":"x","created_at":"yesterday"}`)},
		{"remove empty", raw(TypeRemove, `{}`)},
		{"remove system", raw(TypeRemove, `{"kind":"user","name":"system:admin"}`)},
		{"wrong type", raw("lock.other", string(good))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSet()
			s.Replace([]Lock{testLock("keep")})
			gen := s.Generation()
			reply, err := s.HandleMessage(tt.m)
			if err == nil || !errors.Is(err, tunnel.ErrBadMessage) {
				t.Fatalf("HandleMessage = %v, want ErrBadMessage", err)
			}
			if s.Generation() != gen {
				t.Fatal("a rejected push changed the set")
			}
			if reply.ReplyTo != 7 || CheckAck(reply) == nil {
				t.Fatalf("reply %+v does not carry the error", reply)
			}
		})
	}
	if err := CheckAck(tunnel.Message{Type: TypeList}); err == nil {
		t.Fatal("CheckAck accepted a non-ack")
	}
	if _, err := ChangeMessage(Change{Op: "frobnicate"}); err == nil {
		t.Fatal("ChangeMessage accepted an unknown op")
	}
}

func FuzzDecodeLockMessage(f *testing.F) {
	good, _ := json.Marshal(testLock("alice"))
	f.Add(TypeSet, string(good))
	f.Add(TypeList, `{"locks":[`+string(good)+`]}`)
	f.Add(TypeRemove, `{"kind":"bot","name":"ci"}`)
	f.Add(TypeAck, `{"generation":3,"error":"x"}`)
	f.Add(TypeList, `{"locks":null}`)
	f.Fuzz(func(t *testing.T, typ, body string) {
		m := tunnel.Message{Type: typ, ID: 1, Body: json.RawMessage(body)}
		s := NewSet()
		reply, err := s.HandleMessage(m)
		if reply.Type != TypeAck {
			t.Fatalf("reply type %q", reply.Type)
		}
		if err == nil {
			for _, l := range s.List(time.Time{}) {
				if l.Validate() != nil {
					t.Fatalf("invalid lock accepted: %+v", l)
				}
			}
		}
		_ = CheckAck(m)
	})
}
