package proxy_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/worker"
)

// BenchmarkRecordingUpload measures how fast a spooled recording moves from
// a real worker to a real proxy over the tunnel on loopback: the time from
// the proxy's first byte of the upload (its part file appears) to the
// verified recording in its store. LIMEN_UPLOAD_BENCH_MIB sets the size
// (default 256). The proxy's goroutines carry the pprof label side=proxy
// and the worker's side=worker, so that a -cpuprofile shows each side:
//
//	go test -run '^$' -bench RecordingUpload -benchtime 3x -cpuprofile cpu.out ./gateway/proxy/
//	go tool pprof -top -tagfocus side=proxy cpu.out
func BenchmarkRecordingUpload(b *testing.B) {
	mib := 256
	if s := os.Getenv("LIMEN_UPLOAD_BENCH_MIB"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("LIMEN_UPLOAD_BENCH_MIB=%q: want a positive number of MiB", s)
		}
		mib = n
	}
	size := int64(mib) << 20
	b.SetBytes(size)
	var total time.Duration
	for i := range b.N {
		b.StopTimer()
		total += uploadOnce(b, size, i)
	}
	b.ReportMetric(float64(size*int64(b.N))/(1<<20)/total.Seconds(), "MiB/s")
}

// uploadOnce runs a fresh proxy and worker, spools one recording of size
// bytes and returns how long its upload took, from the first stored byte to
// the verified recording.
func uploadOnce(b *testing.B, size int64, n int) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	dir := b.TempDir()
	p, err := proxy.New(ctx, proxy.Config{DataDir: filepath.Join(dir, "proxy"), Clusters: []string{testCluster}, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	id := "0123456789abcdef0123456789ab" + strconv.Itoa(1000+n)
	live, err := p.Sessions.Track(ctx, sessions.Session{ID: id, Principal: alice, Cluster: testCluster,
		Kind: sessions.KindExec, Expires: time.Now().Add(time.Hour)})
	if err != nil {
		b.Fatal(err)
	}
	defer live.End(sessions.ReasonCompleted)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan struct{})
	go pprof.Do(ctx, pprof.Labels("side", "proxy"), func(ctx context.Context) {
		defer close(served)
		_ = p.Serve(ctx, ln)
	})
	defer func() { cancel(); <-served }()

	tok, _, err := p.Tokens.Create(ctx, testCluster, 10*time.Minute, p.CA.Fingerprint(), identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "admin"})
	if err != nil {
		b.Fatal(err)
	}
	wdir := filepath.Join(dir, "worker")
	wid, err := enroll.Enroll(ctx, enroll.Options{Proxy: ln.Addr().String(), Cluster: testCluster, Token: tok.String(), DataDir: wdir})
	if err != nil {
		b.Fatal(err)
	}
	spoolZeros(b, worker.SpoolDir(wdir), id, size)
	caFile := filepath.Join(dir, "kube-ca.pem")
	if err := os.WriteFile(caFile, p.CA.RootPEM(), 0o600); err != nil {
		b.Fatal(err)
	}
	w, err := worker.New(ctx, worker.Config{Identity: wid, DataDir: wdir, APIServer: "https://127.0.0.1:1",
		CAFile: caFile, TokenFile: filepath.Join(dir, "no-token"), Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	ran := make(chan struct{})
	go pprof.Do(ctx, pprof.Labels("side", "worker"), func(ctx context.Context) {
		defer close(ran)
		_ = w.Run(ctx)
	})
	defer func() { cancel(); <-ran }()

	part := filepath.Join(recstore.Path(filepath.Join(dir, "proxy")), testCluster, id+".cast.part")
	deadline := time.Now().Add(10 * time.Minute)
	for {
		if _, err := os.Stat(part); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the upload never started")
		}
		time.Sleep(time.Millisecond)
	}
	b.StartTimer()
	start := time.Now()
	store, err := recstore.OpenExisting(recstore.Path(filepath.Join(dir, "proxy")))
	if err != nil {
		b.Fatal(err)
	}
	for {
		if info, err := store.Find(id); err == nil {
			if info.Size != size {
				b.Fatalf("stored %d bytes, want %d", info.Size, size)
			}
			break
		} else if !errors.Is(err, recstore.ErrNotFound) {
			b.Fatal(err)
		}
		if time.Now().After(deadline) {
			b.Fatal("the upload never finished")
		}
		time.Sleep(time.Millisecond)
	}
	took := time.Since(start)
	b.StopTimer()
	return took
}

// spoolZeros commits a recording of size zero bytes to the spool in dir
// through the spool's own writer, so that it has the spool's checksum.
func spoolZeros(tb testing.TB, dir, id string, size int64) recording.Item {
	tb.Helper()
	spool, err := recording.OpenSpool(dir)
	if err != nil {
		tb.Fatal(err)
	}
	f, err := spool.Create(id)
	if err != nil {
		tb.Fatal(err)
	}
	block := make([]byte, 1<<20)
	for left := size; left > 0; {
		n := min(left, int64(len(block)))
		if _, err := f.Write(block[:n]); err != nil {
			tb.Fatal(err)
		}
		left -= n
	}
	it, err := f.Commit()
	if err != nil {
		tb.Fatal(err)
	}
	return it
}
