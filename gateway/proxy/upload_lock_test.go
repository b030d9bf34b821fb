package proxy_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/adminapi"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/worker"
)

// lockBound is how soon a lock must end a stream on both hops (DESIGN.md
// §2), upload or not.
const lockBound = time.Second

// TestLockDuringLargeUpload: while a worker uploads a large recording to
// the proxy, a lock made through the admin API still reaches the worker and
// is acknowledged, and ends the locked user's streams on both hops, within
// a second; the upload goes on and is stored whole, on the same tunnel
// session (a lock push that waited behind the upload past its timeout would
// have dropped the worker). The recording is 128 MiB; LIMEN_UPLOAD_LOCK_MIB
// sets another size (the issue asks for 1 GiB: LIMEN_UPLOAD_LOCK_MIB=1024).
// The streams are the session registries' entries, which the watchdogs of
// both hops end; the e2e lock tests end real kubectl streams the same way.
func TestLockDuringLargeUpload(t *testing.T) {
	mib := 128
	if s := os.Getenv("LIMEN_UPLOAD_LOCK_MIB"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 16 {
			t.Fatalf("LIMEN_UPLOAD_LOCK_MIB=%q: want a number of MiB, at least 16", s)
		}
		mib = n
	}
	size := int64(mib) << 20
	const recorded = "0123456789abcdef0123456789abcdef" // bob's exec, which is being uploaded
	bob := identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "bob"}
	var item recording.Item
	a := startAssembledWith(t, func(p *proxy.Server) {
		track(t, p.Sessions, sessions.Session{ID: recorded, Principal: bob, Cluster: testCluster, Kind: sessions.KindExec})
	}, func(wdir string) {
		item = spoolZeros(t, worker.SpoolDir(wdir), recorded, size)
	})
	// alice's streams, one on each hop.
	onProxy := track(t, a.proxy.Sessions, sessions.Session{ID: "alice-proxy", Principal: alice, Cluster: testCluster, Kind: sessions.KindExec})
	onWorker := track(t, a.worker.Sessions, sessions.Session{ID: "alice-worker", Principal: alice, Cluster: testCluster, Kind: sessions.KindExec})
	tunnelSession := a.proxy.Tunnel.Workers()[0].SessionID

	part := filepath.Join(recstore.Path(a.proxyDir), testCluster, recorded+".cast.part")
	underway := min(size/8, 32<<20)
	waitUntil(t, "the upload to get under way", func() bool {
		fi, err := os.Stat(part)
		return err == nil && fi.Size() >= underway
	})

	admin := (&running{Server: a.proxy, addr: a.addr}).clients(t, rootAdmin, time.Hour)
	start := time.Now()
	if _, err := admin.admin.Lock(context.Background(), adminapi.LockRequest{Target: locks.TargetOf(alice), Reason: "during an upload"}); err != nil {
		t.Fatal(err)
	}
	acked := time.Since(start)
	ended := map[string]time.Duration{}
	for name, live := range map[string]*sessions.Live{"proxy": onProxy, "worker": onWorker} {
		select {
		case <-live.Context().Done():
			ended[name] = time.Since(start)
		case <-time.After(10 * lockBound):
			t.Fatalf("the lock did not end alice's stream on the %s within %s", name, 10*lockBound)
		}
	}
	partSize := int64(-1)
	if fi, err := os.Stat(part); err == nil {
		partSize = fi.Size()
	}
	store, err := recstore.OpenExisting(recstore.Path(a.proxyDir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Find(recorded); !errors.Is(err, recstore.ErrNotFound) {
		t.Fatalf("the upload of %d MiB finished before the lock took effect, so the test shows nothing; use a larger LIMEN_UPLOAD_LOCK_MIB", mib)
	}
	t.Logf("%d MiB upload at %d MiB: lock acknowledged by the worker in %s; alice's stream ended on the proxy in %s, on the worker in %s",
		mib, partSize>>20, acked.Round(time.Millisecond), ended["proxy"].Round(time.Millisecond), ended["worker"].Round(time.Millisecond))
	if acked > lockBound || ended["proxy"] > lockBound || ended["worker"] > lockBound {
		t.Errorf("during the upload the lock took %s to be acknowledged and %s / %s to end the streams on proxy / worker, want each within %s",
			acked, ended["proxy"], ended["worker"], lockBound)
	}

	deadline := time.Now().Add(5 * time.Minute)
	for {
		info, err := store.Find(recorded)
		if err == nil {
			if info.Size != size || info.SHA256 != item.SHA256 {
				t.Fatalf("stored %d bytes with sha256 %s, want %d with %s", info.Size, info.SHA256, size, item.SHA256)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the upload never finished")
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitUntil(t, "the spool to drop the uploaded recording", func() bool {
		items, err := recording.SpoolUsageOf(worker.SpoolDir(a.workerDir), 0)
		return err == nil && items.Pending == 0
	})
	if w := a.proxy.Tunnel.Workers(); len(w) != 1 || w[0].SessionID != tunnelSession {
		t.Fatalf("workers %+v, want the tunnel session %s kept through the upload and the lock", w, tunnelSession)
	}
}

// track registers s, expiring in an hour, and ends it when the test ends.
func track(t *testing.T, reg *sessions.Registry, s sessions.Session) *sessions.Live {
	t.Helper()
	s.Expires = time.Now().Add(time.Hour)
	live, err := reg.Track(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.End(sessions.ReasonCompleted) })
	return live
}
