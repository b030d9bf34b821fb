package doctor

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/gateway/worker"
)

var quiet = slog.New(slog.DiscardHandler)

// TestPolicy: the status a real engine saves is read back; no status, or
// no active bundle (a bundle service that never answered) fails, a last
// fetch that failed while a bundle stays active warns.
func TestPolicy(t *testing.T) {
	ctx := context.Background()
	embedded := t.TempDir()
	e, err := policy.New(ctx, policy.Options{PersistDir: embedded, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	wantResult(t, Policy(embedded, "proxy"), OK, "bundle revision", "embedded")

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	down := t.TempDir()
	e, err = policy.New(ctx, policy.Options{PersistDir: down, BundleURL: "https://" + closedAddr(t) + "/bundle.tar.gz",
		PublicKeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), KeyAlgorithm: "ES256", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Refresh(ctx); err == nil {
		t.Fatal("a fetch from a closed port succeeded")
	}
	e.Close()
	wantResult(t, Policy(down, "worker"), Fail, "no bundle active", "503")

	wantResult(t, Policy(t.TempDir(), "proxy"), Fail, "no policy status")

	// A bundle active while the service fails: written as the engine writes
	// it, since making an engine hold a bundle and then lose its service
	// takes a signed bundle server.
	failing := t.TempDir()
	st := policy.Status{Source: policy.SourceService, URL: "https://bundles.example/b.tar.gz", Revision: "42",
		ActivatedAt: time.Now().Add(-time.Hour), LastError: "fetch: connection refused", LastErrorAt: time.Now()}
	b, _ := json.Marshal(st)
	if err := os.WriteFile(filepath.Join(failing, "status.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	wantResult(t, Policy(failing, "proxy"), Warn, "revision 42", "connection refused")
}

// TestAudit: a real audit database is healthy under its limit, warns near
// it and fails at it; a missing one fails.
func TestAudit(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := audit.Open(ctx, audit.Path(dir), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	wantResult(t, Audit(ctx, dir, audit.DefaultMaxBytes), OK, "0 events", "10 GiB")
	st, _ = audit.Open(ctx, audit.Path(dir), audit.Options{ReadOnly: true})
	u, err := st.Usage(ctx)
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	wantResult(t, Audit(ctx, dir, u.Used*100/85), Warn, "nearly full")
	wantResult(t, Audit(ctx, dir, u.Used), Fail, "FULL", "every request is refused")
	wantResult(t, Audit(ctx, t.TempDir(), audit.DefaultMaxBytes), Fail, "no audit database")
}

// TestRecordingStore: a store holding a real upload is measured against its
// limit: ok, nearly full, full; none yet is fine.
func TestRecordingStore(t *testing.T) {
	dir := t.TempDir()
	wantResult(t, RecordingStore(dir, 1<<20), OK, "none yet")
	rs, err := recstore.Open(recstore.Path(dir))
	if err != nil {
		t.Fatal(err)
	}
	data := []byte(`{"version":3,"term":{"cols":80,"rows":24}}` + "\n")
	sum := sha256.Sum256(data)
	up, offer := rs.Begin("prod", recstore.Header{ID: "s1", Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])})
	if up == nil {
		t.Fatalf("upload: %s", offer.Reason)
	}
	if _, err := up.ReadFrom(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if r := up.Commit(); r.Status != recstore.Stored {
		t.Fatalf("upload: %s", r.Reason)
	}
	up.Close()
	wantResult(t, RecordingStore(dir, 1<<20), OK, "1 recordings")
	u, err := rs.Usage()
	if err != nil {
		t.Fatal(err)
	}
	wantResult(t, RecordingStore(dir, u.Used*100/85), Warn, "nearly full")
	wantResult(t, RecordingStore(dir, u.Used), Fail, "FULL", "uploads are refused")
}

// TestSpool: a real spool with a finished recording is measured against
// its limit; full (no room for one more recording) fails, a recording
// waiting too long warns, no spool fails.
func TestSpool(t *testing.T) {
	dir := t.TempDir()
	wantResult(t, Spool(dir, recording.DefaultSpoolMaxBytes, 0), Fail, "no recording spool")
	sp, err := recording.OpenSpool(worker.SpoolDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	f, err := sp.Create("s1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(`{"version":3}` + "\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	wantResult(t, Spool(dir, recording.DefaultSpoolMaxBytes, time.Minute), OK, "1 recordings waiting")
	wantResult(t, Spool(dir, recording.DefaultSpoolMaxBytes, time.Hour), Warn, "the oldest for 1h0m0s", "not getting through")
	wantResult(t, Spool(dir, recording.MinMaxBytes, 0), Fail, "FULL", "exec and attach")
}

// TestDataDir: a missing data directory is one failure, not one per
// store; the worker still checks its token and API server.
func TestDataDir(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	r := Proxy(context.Background(), ProxyOptions{DataDir: missing})
	if len(r) != 1 {
		t.Fatalf("proxy: %d results, want 1: %+v", len(r), r)
	}
	wantResult(t, r[0], Fail, "no such file")
	r = Worker(context.Background(), WorkerOptions{DataDir: missing, TokenFile: filepath.Join(missing, "token"), APIServer: "https://" + closedAddr(t),
		CAFile: filepath.Join(missing, "ca.crt")})
	if len(r) != 3 || r[0].Check != "data dir" || r[1].Check != "token" || r[2].Check != "api server" {
		t.Fatalf("worker: %+v", r)
	}
	wantResult(t, r[0], Fail, "no such file")
}

// TestIdentity: a data directory without an enrollment fails and says how
// to enroll. (Enrolled, expiring and expired identities are checked against
// a real proxy in cmd/limen.)
func TestIdentity(t *testing.T) {
	id, r := Identity(t.TempDir(), time.Now())
	if id != nil {
		t.Fatal("identity from an empty directory")
	}
	wantResult(t, r, Fail, "not enrolled")
	if r.Fix == "" || !containsAll(r.Fix, "limen tokens create", "--join-token") {
		t.Fatalf("fix %q", r.Fix)
	}
}
