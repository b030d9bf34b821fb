package locks

import (
	"fmt"
	"testing"
	"time"
)

func TestDiff(t *testing.T) {
	now := t0.Add(time.Minute)
	a, b, c := testLock("alice"), testLock("bob"), testLock("carol")
	// The store gives times back in UTC without a monotonic reading.
	stored := func(l Lock) Lock { l.CreatedAt = l.CreatedAt.UTC().Round(0); return l }
	other := b
	other.Reason = "another incident"
	lapsed := c
	lapsed.Expires = t0.Add(time.Second)
	longer := a
	longer.Expires = t0.Add(time.Hour)
	botA := a
	botA.Target.Kind = "bot"

	tests := []struct {
		name       string
		have, want []Lock
		changes    string
	}{
		{"same", []Lock{a, b}, []Lock{stored(b), stored(a)}, "[]"},
		{"added", []Lock{a}, []Lock{a, b}, "[set:bob]"},
		{"removed, as by unlock --local", []Lock{a, b}, []Lock{b}, "[remove:alice]"},
		{"reason changed", []Lock{a, b}, []Lock{a, other}, "[set:bob]"},
		{"expiry changed", []Lock{a}, []Lock{longer}, "[set:alice]"},
		{"lapsed in both", []Lock{lapsed}, []Lock{lapsed}, "[]"},
		{"lapsed in the set only", []Lock{lapsed}, nil, "[]"},
		{"same name, other kind", []Lock{a}, []Lock{botA}, "[set:alice remove:alice]"},
		{"everything", []Lock{c, a}, nil, "[remove:alice remove:carol]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, ch := range Diff(tt.have, tt.want, now) {
				got = append(got, string(ch.Op)+":"+ch.Lock.Target.Name)
				if err := ch.Validate(); err != nil {
					t.Errorf("change %+v: %v", ch, err)
				}
			}
			if s := fmt.Sprint(got); s != tt.changes && !(s == "[]" && tt.changes == "[]") {
				t.Fatalf("Diff = %s, want %s", s, tt.changes)
			}
			// Applying the changes makes have into want.
			s := NewSet()
			s.now = func() time.Time { return now }
			s.Replace(tt.have)
			for _, ch := range Diff(tt.have, tt.want, now) {
				s.Apply(ch)
			}
			if rest := Diff(s.List(now), tt.want, now); len(rest) != 0 {
				t.Fatalf("after applying, still %+v", rest)
			}
		})
	}
}
