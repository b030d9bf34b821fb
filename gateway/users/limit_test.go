package users

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// TestLimiterBoundedWithoutRefusingNewcomers: many addresses, each within
// its own limit, spray fresh names into a small table. The table stays at
// its bound, a newcomer is still let in, and a name someone exhausted
// before the spray stays exhausted (the spray cannot buy it fresh tries by
// pushing it out).
func TestLimiterBoundedWithoutRefusingNewcomers(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := newLimiter(Limits{UserBurst: 3, UserEvery: time.Hour, AddrBurst: 2, AddrEvery: time.Hour})
	l.max = 100
	for i := range 3 {
		if !l.allow("alice", fmt.Sprintf("10.9.0.%d", i), now) {
			t.Fatalf("alice's try %d refused", i)
		}
	}
	for i := range 1000 {
		addr := fmt.Sprintf("10.1.%d.%d", i/256, i%256)
		l.allow(fmt.Sprintf("spray-%d-a", i), addr, now)
		l.allow(fmt.Sprintf("spray-%d-b", i), addr, now)
	}
	if len(l.names) > l.max || len(l.addrs) > l.max {
		t.Fatalf("tables hold %d names and %d addresses, bound %d", len(l.names), len(l.addrs), l.max)
	}
	if !l.allow("bob", "10.200.0.1", now) {
		t.Fatal("a newcomer is refused after the spray: a full table locks honest callers out")
	}
	if l.allow("alice", "10.200.0.2", now) {
		t.Fatal("alice's exhausted name has fresh tries after the spray: it was pushed out of the table")
	}
	// Refill: one try per interval comes back.
	if !l.allow("alice", "10.200.0.3", now.Add(time.Hour)) {
		t.Fatal("alice's name did not get a try back after an interval")
	}
}

// TestLimiterAddressFirst: a refused address spends no try of the name,
// so an attacker past its own limit cannot drain somebody else's.
func TestLimiterAddressFirst(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := newLimiter(Limits{UserBurst: 2, UserEvery: time.Hour, AddrBurst: 1, AddrEvery: time.Hour})
	l.allow("x", "192.0.2.1", now)
	for range 10 {
		if l.allow("alice", "192.0.2.1", now) {
			t.Fatal("an exhausted address was allowed")
		}
	}
	if _, ok := l.names["alice"]; ok {
		t.Fatal("a refused address created an entry for the name")
	}
	for i := range 2 {
		if !l.allow("alice", fmt.Sprintf("198.51.100.%d", i), now) {
			t.Fatalf("alice's try %d refused: the refused address spent it", i)
		}
	}
}

func TestAddrKey(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.1":               "192.0.2.1",
		"::ffff:192.0.2.1":        "192.0.2.1",
		"2001:db8:1:2:aaaa::1":    "2001:db8:1:2::/64",
		"2001:db8:1:2:bbbb::2":    "2001:db8:1:2::/64",
		"fe80::1%eth0":            "fe80::/64",
		"::1":                     "::/64",
		"not an address":          "not an address",
		string(make([]byte, 100)): string(make([]byte, 64)),
		"2001:db8:1:3::1":         "2001:db8:1:3::/64",
	} {
		if got := addrKey(addr); got != want {
			t.Errorf("addrKey(%q) = %q, want %q", addr, got, want)
		}
	}
}

// TestBucketsNeverExceedTheirLimit, for the smallest tables too.
func TestBucketsNeverExceedTheirLimit(t *testing.T) {
	for _, limit := range []int{1, 2, 3, 4, 7, 100} {
		b := buckets{}
		now := int64(1_000_000)
		for i := range 1000 {
			if !b.take(fmt.Sprint("k", i), time.Second, 3, now+int64(i), limit) {
				t.Fatalf("limit %d: new key %d refused", limit, i)
			}
			if len(b) > limit {
				t.Fatalf("limit %d: %d entries after key %d", limit, len(b), i)
			}
		}
	}
}

// FuzzAddrKey: any address string gives a bounded key without panicking,
// and two addresses of one IPv6 /64 share theirs.
func FuzzAddrKey(f *testing.F) {
	for _, s := range []string{"192.0.2.1", "2001:db8::1", "::ffff:10.0.0.1", "fe80::1%eth0", "", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		k := addrKey(addr)
		if len(k) > 64 {
			t.Fatalf("addrKey(%q) = %q: %d bytes", addr, k, len(k))
		}
		if ip, err := netip.ParseAddr(addr); err == nil && ip.Unmap().Is6() {
			b := ip.As16()
			b[15] ^= 0xff
			if other := addrKey(netip.AddrFrom16(b).String()); other != k {
				t.Fatalf("%s and its /64 neighbour have keys %q and %q", addr, k, other)
			}
		}
	})
}
