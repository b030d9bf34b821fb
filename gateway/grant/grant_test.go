package grant

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func testKey(t testing.TB, seed byte) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
	return priv.Public().(ed25519.PublicKey), priv
}

func validGrant() Grant {
	return Grant{
		Principal: identity.Principal{Kind: identity.KindUser, Name: "alice", Traits: map[string][]string{"team": {"a"}}},
		Groups:    []string{"limen:view", "limen:edit", "limen:view"},
		Cluster:   "prod-1",
		IssuedAt:  t0,
		ExpiresAt: t0.Add(5 * time.Minute),
	}
}

func TestSignVerifyRoundTrip(t *testing.T) {
	pub, priv := testKey(t, 1)
	token, err := Sign(priv, validGrant())
	if err != nil {
		t.Fatal(err)
	}
	got, err := Verify(pub, token, "prod-1", t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"limen:edit", "limen:view"}; strings.Join(got.Groups, ",") != strings.Join(want, ",") {
		t.Errorf("groups = %v, want sorted and unique %v", got.Groups, want)
	}
	if got.Version != Version || got.Principal.String() != "user:alice" ||
		!got.ExpiresAt.Equal(t0.Add(5*time.Minute)) || !got.IssuedAt.Equal(t0) ||
		got.Principal.Traits["team"][0] != "a" {
		t.Errorf("round trip changed the grant: %+v", got)
	}
}

func TestNewSessionID(t *testing.T) {
	a, err := NewSessionID()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewSessionID()
	if !validSessionID(a) || a == b {
		t.Fatalf("session ids %q, %q: want distinct 32-hex strings", a, b)
	}
}

func TestSignRefuses(t *testing.T) {
	_, priv := testKey(t, 1)
	tests := []struct {
		name string
		mut  func(*Grant)
	}{
		{"bad principal", func(g *Grant) { g.Principal.Kind = "root" }},
		{"no groups", func(g *Grant) { g.Groups = nil }},
		{"system group", func(g *Grant) { g.Groups = []string{"limen:view", "system:masters"} }},
		{"empty group", func(g *Grant) { g.Groups = []string{""} }},
		{"group with newline", func(g *Grant) { g.Groups = []string{"a\nb"} }},
		{"group with comma", func(g *Grant) { g.Groups = []string{"a,b"} }},
		{"bad cluster", func(g *Grant) { g.Cluster = "Prod" }},
		{"empty cluster", func(g *Grant) { g.Cluster = "" }},
		{"expiry before issue", func(g *Grant) { g.ExpiresAt = g.IssuedAt }},
		{"zero expiry", func(g *Grant) { g.ExpiresAt = time.Time{} }},
		{"unknown version", func(g *Grant) { g.Version = 2 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := validGrant()
			tt.mut(&g)
			if _, err := Sign(priv, g); err == nil {
				t.Fatal("Sign accepted an invalid grant")
			}
		})
	}
	if _, err := Sign(priv[:10], validGrant()); err == nil {
		t.Error("Sign accepted a truncated key")
	}
}

// signRaw signs an arbitrary payload the way Sign does, to build tokens Sign
// itself would refuse to produce.
func signRaw(priv ed25519.PrivateKey, version byte, payload []byte) []byte {
	tok := append([]byte{version}, payload...)
	return append(tok, ed25519.Sign(priv, signedMessage(tok))...)
}

func payloadOf(t *testing.T, mut func(m map[string]any)) []byte {
	t.Helper()
	g := validGrant()
	g.Version = Version
	g.Groups = []string{"limen:edit", "limen:view"}
	raw, _ := json.Marshal(g)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	mut(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestVerifyRefuses(t *testing.T) {
	pub, priv := testKey(t, 1)
	_, other := testKey(t, 2)
	good, err := Sign(priv, validGrant())
	if err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Minute)
	flip := func(i int) []byte { b := bytes.Clone(good); b[i] ^= 1; return b }
	forged, _ := Sign(other, validGrant())
	tests := []struct {
		name    string
		token   []byte
		cluster string
		now     time.Time
		want    error
	}{
		{"empty", nil, "prod-1", now, ErrMalformed},
		{"short", good[:40], "prod-1", now, ErrMalformed},
		{"too large", make([]byte, MaxTokenSize+1), "prod-1", now, ErrMalformed},
		{"unknown version byte", append([]byte{2}, good[1:]...), "prod-1", now, ErrMalformed},
		{"other key", forged, "prod-1", now, ErrForged},
		{"flipped payload bit", flip(10), "prod-1", now, ErrForged},
		{"flipped signature bit", flip(len(good) - 1), "prod-1", now, ErrForged},
		{"truncated signature", good[:len(good)-1], "prod-1", now, ErrForged},
		{"appended byte", append(bytes.Clone(good), 0), "prod-1", now, ErrForged},
		{"wrong cluster", good, "prod-2", now, ErrWrongCluster},
		{"expired exactly", good, "prod-1", t0.Add(5 * time.Minute), ErrExpired},
		{"expired", good, "prod-1", t0.Add(time.Hour), ErrExpired},
		{"issued in the future", good, "prod-1", t0.Add(-time.Hour), ErrNotYetValid},
		{"signed trailing bytes", signRaw(priv, 1, append(payloadOf(t, func(map[string]any) {}), ' ', '{', '}')), "prod-1", now, ErrMalformed},
		{"signed trailing whitespace only", signRaw(priv, 1, append(payloadOf(t, func(map[string]any) {}), ' ')), "prod-1", now, ErrMalformed},
		{"signed unknown field", signRaw(priv, 1, payloadOf(t, func(m map[string]any) { m["admin"] = true })), "prod-1", now, ErrMalformed},
		{"signed payload version 2", signRaw(priv, 1, payloadOf(t, func(m map[string]any) { m["v"] = 2 })), "prod-1", now, ErrMalformed},
		{"signed system group", signRaw(priv, 1, payloadOf(t, func(m map[string]any) { m["groups"] = []string{"limen:view", "system:masters"} })), "prod-1", now, ErrSystemGroup},
		{"signed unsorted groups", signRaw(priv, 1, payloadOf(t, func(m map[string]any) { m["groups"] = []string{"b", "a"} })), "prod-1", now, ErrMalformed},
		{"signed duplicate groups", signRaw(priv, 1, payloadOf(t, func(m map[string]any) { m["groups"] = []string{"a", "a"} })), "prod-1", now, ErrMalformed},
		{"signed no groups", signRaw(priv, 1, payloadOf(t, func(m map[string]any) { m["groups"] = []string{} })), "prod-1", now, ErrMalformed},
		{"signed null groups", signRaw(priv, 1, payloadOf(t, func(m map[string]any) { m["groups"] = nil })), "prod-1", now, ErrMalformed},
		{"signed system principal", signRaw(priv, 1, payloadOf(t, func(m map[string]any) {
			m["principal"] = map[string]any{"kind": "user", "name": "system:admin"}
		})), "prod-1", now, ErrMalformed},
		{"signed not json", signRaw(priv, 1, []byte("not json")), "prod-1", now, ErrMalformed},
		{"signed array", signRaw(priv, 1, []byte("[1,2]")), "prod-1", now, ErrMalformed},
		{"signed session id (a Request's field, never the grant's)", signRaw(priv, 1, payloadOf(t, func(m map[string]any) { m["sid"] = "0123456789abcdef0123456789abcdef" })), "prod-1", now, ErrMalformed},
		{"signed missing expiry", signRaw(priv, 1, payloadOf(t, func(m map[string]any) { delete(m, "exp") })), "prod-1", now, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Verify(pub, tt.token, tt.cluster, tt.now)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Verify error = %v, want %v", err, tt.want)
			}
			if n := countSentinels(err); n != 1 {
				t.Errorf("error %q wraps %d sentinels, want exactly 1", err, n)
			}
		})
	}
	if _, err := Verify(pub[:5], good, "prod-1", now); !errors.Is(err, ErrForged) {
		t.Errorf("truncated public key: error = %v, want ErrForged", err)
	}
}

func countSentinels(err error) int {
	n := 0
	for _, s := range []error{ErrMalformed, ErrForged, ErrExpired, ErrNotYetValid, ErrWrongCluster, ErrSystemGroup} {
		if errors.Is(err, s) {
			n++
		}
	}
	return n
}

func FuzzVerify(f *testing.F) {
	pub, priv := testKey(f, 1)
	good, err := Sign(priv, validGrant())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)-ed25519.SignatureSize])
	f.Add([]byte{1, '{', '}'})
	f.Add([]byte{})
	now := t0.Add(time.Minute)
	f.Fuzz(func(t *testing.T, token []byte) {
		g, err := Verify(pub, token, "prod-1", now)
		if err != nil {
			if countSentinels(err) != 1 {
				t.Fatalf("error %q wraps %d sentinels", err, countSentinels(err))
			}
			return
		}
		// Only the genuine token can verify: anything else would be a forgery.
		if !bytes.Equal(token, good) {
			t.Fatalf("a token other than the signed one verified: %x", token)
		}
		if g.Cluster != "prod-1" || len(g.Groups) == 0 {
			t.Fatalf("verified grant is inconsistent: %+v", g)
		}
	})
}

// FuzzDecode exercises the strict payload decoder directly, since the fuzzer
// cannot forge signatures to reach it through Verify.
func FuzzDecode(f *testing.F) {
	g := validGrant()
	g.Version = Version
	g.Groups = []string{"limen:edit", "limen:view"}
	raw, _ := json.Marshal(g)
	f.Add(raw)
	f.Add([]byte(`{"v":1}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		got, err := decode(payload)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrSystemGroup) {
				t.Fatalf("decode error %q wraps neither ErrMalformed nor ErrSystemGroup", err)
			}
			return
		}
		for i, grp := range got.Groups {
			if strings.HasPrefix(grp, "system:") || i > 0 && got.Groups[i-1] >= grp {
				t.Fatalf("accepted groups %q", got.Groups)
			}
		}
		if got.Version != Version || got.Principal.Validate() != nil {
			t.Fatalf("accepted invalid grant %+v", got)
		}
	})
}

func BenchmarkSign(b *testing.B) {
	_, priv := testKey(b, 1)
	g := validGrant()
	for b.Loop() {
		if _, err := Sign(priv, g); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	pub, priv := testKey(b, 1)
	token, err := Sign(priv, validGrant())
	if err != nil {
		b.Fatal(err)
	}
	now := t0.Add(time.Minute)
	for b.Loop() {
		if _, err := Verify(pub, token, "prod-1", now); err != nil {
			b.Fatal(err)
		}
	}
}
