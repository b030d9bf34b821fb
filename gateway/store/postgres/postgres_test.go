package postgres_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/bots"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/store"
	"github.com/limenhq/limen/gateway/store/postgres"
	"github.com/limenhq/limen/gateway/store/storetest"
	pgtest "github.com/limenhq/limen/test/postgres"
)

// TestPostgres runs everything against one real PostgreSQL server (test/postgres),
// each part in a database of its own.
func TestPostgres(t *testing.T) {
	srv := pgtest.Start(t)
	open := func(t *testing.T, url string) *postgres.Backend {
		t.Helper()
		b, err := postgres.Open(context.Background(), postgres.Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Run("Conformance", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Backend { return open(t, srv.Database(t)) })
	})
	t.Run("ConcurrentOpenMigratesOnce", func(t *testing.T) { testConcurrentOpen(t, srv.Database(t)) })
	t.Run("NewerSchemaRefused", func(t *testing.T) {
		url := srv.Database(t)
		open(t, url).Close()
		db := url[strings.LastIndex(url, "/")+1 : strings.Index(url, "?")]
		srv.SQL(t, db, "UPDATE limen_schema SET version = 9 WHERE domain = 'audit'")
		_, err := postgres.Open(context.Background(), postgres.Config{URL: url})
		if !errors.Is(err, store.ErrSchemaNewer) || !strings.Contains(err.Error(), "audit schema is at version 9") {
			t.Fatalf("open a database of a newer schema: %v, want ErrSchemaNewer naming the audit schema", err)
		}
		t.Logf("refused: %v", err)
	})
	t.Run("PasswordFile", func(t *testing.T) {
		url := srv.Database(t)
		bare := strings.Replace(url, ":"+pgtest.Password+"@", "@", 1)
		if _, err := postgres.Open(context.Background(), postgres.Config{URL: bare}); err == nil {
			t.Fatal("the server accepted a connection without the password: the test proves nothing")
		}
		file := filepath.Join(t.TempDir(), "password")
		if err := os.WriteFile(file, []byte(pgtest.Password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := postgres.Open(context.Background(), postgres.Config{URL: bare, PasswordFile: file})
		if err != nil {
			t.Fatalf("with the password file: %v", err)
		}
		if strings.Contains(b.Where(), pgtest.Password) {
			t.Fatalf("Where names the password: %s", b.Where())
		}
		b.Close()
	})
	t.Run("FailedAppendStoresNothingAndLeavesNoTransaction", func(t *testing.T) { testFailedAppend(t, open(t, srv.Database(t))) })
	t.Run("KillIsAnnounced", func(t *testing.T) { testKillAnnounced(t, open(t, srv.Database(t))) })
	t.Run("ReplayLedger", func(t *testing.T) { testReplayLedger(t, srv.Database(t), open) })
	t.Run("LeaseMovesWhenItsHolderDies", func(t *testing.T) { testLease(t, srv, open) })
	// Last: it stops the server and starts it again.
	t.Run("AuditFailsClosedWhileDown", func(t *testing.T) { testAuditDown(t, srv, open(t, srv.Database(t))) })
}

// testConcurrentOpen: proxies starting together on a new database all
// succeed, and each migration is applied once. Without the advisory lock
// the concurrent CREATE TABLEs collide (duplicate key in pg_type).
func testConcurrentOpen(t *testing.T, url string) {
	const n = 6
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			b, err := postgres.Open(context.Background(), postgres.Config{URL: url})
			if err == nil {
				b.Close()
			}
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent open: %v", err)
		}
	}
}

// testAuditDown: with the database stopped, an event is refused with
// ErrUnavailable (the proxy answers 503 and relays nothing), quickly; once
// the database is back, events are stored again without a restart.
func testAuditDown(t *testing.T, srv *pgtest.Server, b *postgres.Backend) {
	ctx := context.Background()
	db, err := b.Audit(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	s, err := audit.New(ctx, db, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer b.Close()
	e := audit.Event{Type: audit.TypeAuthLogin, Time: time.Now(), Principal: identity.Principal{Kind: identity.KindUser, Name: "alice"}}
	if err := s.Emit(ctx, e); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	began := time.Now()
	err = s.Emit(ctx, e)
	if !errors.Is(err, audit.ErrUnavailable) {
		t.Fatalf("emit with the database down: %v, want ErrUnavailable", err)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Fatalf("the refusal took %s", d)
	}
	t.Logf("refused in %s: %v", time.Since(began).Round(time.Millisecond), err)
	if err := s.Room(ctx); err != nil {
		t.Logf("room: %v", err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	var last error
	for range 50 {
		if last = s.Emit(ctx, e); last == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if last != nil {
		t.Fatalf("after the database came back: %v", last)
	}
	got, err := s.Search(ctx, audit.Query{})
	if err != nil || len(got) != 2 {
		t.Fatalf("stored %d events (%v), want the two emitted while it was up", len(got), err)
	}
}

func BenchmarkAuditOverlap(b *testing.B) {
	srv := pgtest.Start(b)
	storetest.BenchAuditOverlap(b, func(b *testing.B) store.Backend {
		be, err := postgres.Open(context.Background(), postgres.Config{URL: srv.Database(b)})
		if err != nil {
			b.Fatal(err)
		}
		return be
	})
}

// TestOpenBadURL: a URL pgx cannot use is refused naming the key, without
// repeating the password it carries.
func TestOpenBadURL(t *testing.T) {
	for _, url := range []string{
		"postgres://limen:hunter2-secret@db.example/limen?sslmode=bogus",
		"postgres://limen:hunter2-secret@db.example:notaport/limen",
	} {
		_, err := postgres.Open(context.Background(), postgres.Config{URL: url})
		if err == nil || !strings.Contains(err.Error(), "database-url") || strings.Contains(err.Error(), "hunter2") {
			t.Fatalf("%s: %v, want a refusal naming database-url without the password", url, err)
		}
		t.Log(err)
	}
}

// testKillAnnounced: a kill request reaches a listener on KillsChannel with
// the session's id, and the row it re-reads carries the mark.
func testKillAnnounced(t *testing.T, b *postgres.Backend) {
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, err := b.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Put(ctx, store.SessionRecord{ID: "s1", Proxy: "proxy-b", Info: "{}", StartNS: 1}); err != nil {
		t.Fatal(err)
	}
	connected, heard := make(chan struct{}, 1), make(chan string, 1)
	go func() {
		_ = b.Watch(ctx, store.KillsChannel, func() { connected <- struct{}{} }, func(id string) { heard <- id })
	}()
	<-connected
	if _, err := d.RequestKill(ctx, "s1", "user:admin"); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-heard:
		r, err := d.Get(ctx, id)
		if id != "s1" || err != nil || r.KillBy != "user:admin" {
			t.Fatalf("heard %q, row %+v %v", id, r, err)
		}
	case <-ctx.Done():
		t.Fatal("the kill request was not announced")
	}
}

// testReplayLedger: a CI token's id is used once across proxies (two
// Backends on one database, as two proxies are), until it expires; keys
// with NUL bytes (issuer NUL jti) are fine; SharedReplays maps a replay to
// bots.ErrReplayed and a database that does not answer to
// bots.ErrReplayUnknown.
func testReplayLedger(t *testing.T, url string, open func(*testing.T, string) *postgres.Backend) {
	a, b := open(t, url), open(t, url)
	defer a.Close()
	defer b.Close()
	ctx := context.Background()
	key, now := "github\x00jti-1", time.Now()
	use := func(be *postgres.Backend, at time.Time) bool {
		t.Helper()
		fresh, err := be.UseOnce(ctx, key, at.Add(time.Minute).UnixNano(), at.UnixNano())
		if err != nil {
			t.Fatal(err)
		}
		return fresh
	}
	if !use(a, now) {
		t.Fatal("first use refused")
	}
	if use(b, now.Add(time.Second)) || use(a, now.Add(time.Second)) {
		t.Fatal("a second use, at the other proxy or the same, was accepted")
	}
	if !use(b, now.Add(2*time.Minute)) {
		t.Fatal("use after expiry refused")
	}
	shared := bots.SharedReplays{Ledger: a}
	if err := shared.Use(key, now.Add(3*time.Minute), now.Add(2*time.Minute)); !errors.Is(err, bots.ErrReplayed) {
		t.Fatalf("replay through SharedReplays: %v, want ErrReplayed", err)
	}
	a.Close()
	if err := shared.Use("github\x00jti-2", now.Add(time.Minute), now); !errors.Is(err, bots.ErrReplayUnknown) {
		t.Fatalf("with the ledger closed: %v, want ErrReplayUnknown", err)
	}
}

// testLease: two proxies want one lease; one holds it, the other waits.
// When the holder's connection is cut (as when its process dies), its job
// is told (its context ends) and the other proxy takes the lease over. The
// export cursor in the database never moves back.
func testLease(t *testing.T, srv *pgtest.Server, open func(*testing.T, string) *postgres.Backend) {
	url := srv.Database(t)
	a, b := open(t, url), open(t, url)
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	held := make(chan string, 2)
	lost := make(chan string, 2)
	job := func(who string) func(context.Context) {
		return func(ctx context.Context) {
			held <- who
			<-ctx.Done()
			lost <- who
		}
	}
	go func() { _ = a.Hold(ctx, "audit-export/webhook", job("a")) }()
	if who := <-held; who != "a" {
		t.Fatalf("first holder %s", who)
	}
	go func() { _ = b.Hold(ctx, "audit-export/webhook", job("b")) }()
	select {
	case who := <-held:
		t.Fatalf("%s holds the lease while a does", who)
	case <-time.After(5 * time.Second):
	}
	db := url[strings.LastIndex(url, "/")+1 : strings.Index(url, "?")]
	srv.SQL(t, db, "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted")
	select {
	case who := <-lost:
		if who != "a" {
			t.Fatalf("%s was told it lost the lease", who)
		}
	case <-ctx.Done():
		t.Fatal("the holder whose connection was cut was never told")
	}
	select {
	case who := <-held:
		if who != "b" {
			t.Fatalf("%s took the lease over", who)
		}
	case <-ctx.Done():
		t.Fatal("the waiting proxy never took the lease over")
	}
	if err := a.SetExportCursor(ctx, "webhook", 40); err != nil {
		t.Fatal(err)
	}
	if err := b.SetExportCursor(ctx, "webhook", 30); err != nil {
		t.Fatal(err)
	}
	if seq, err := b.ExportCursor(ctx, "webhook"); err != nil || seq != 40 {
		t.Fatalf("cursor %d %v, want 40 (it never moves back)", seq, err)
	}
}

// testFailedAppend: Append sends its transaction as one pipeline. A batch
// the server refuses halfway (a NUL byte, which PostgreSQL text cannot
// hold) stores none of its rows, and leaves no connection of the pool in
// the aborted transaction: the next appends, as many as the pool has
// connections, all succeed.
func testFailedAppend(t *testing.T, b *postgres.Backend) {
	defer b.Close()
	ctx := context.Background()
	db, err := b.Audit(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	row := func(data string) store.AuditRecord {
		return store.AuditRecord{TimeNS: time.Now().UnixNano(), Type: "kube.sent", Data: []byte(data)}
	}
	if err := db.Append(ctx, []store.AuditRecord{row(`{"ok":1}`), row("bad\x00")}); err == nil {
		t.Fatal("a row with a NUL byte was stored")
	}
	if n, err := db.Count(ctx); err != nil || n != 0 {
		t.Fatalf("after the refused batch: %d events %v, want none of its rows", n, err)
	}
	for i := range 8 {
		if err := db.Append(ctx, []store.AuditRecord{row(`{"ok":2}`)}); err != nil {
			t.Fatalf("append %d after the refused batch: %v", i, err)
		}
	}
	if n, err := db.Count(ctx); err != nil || n != 8 {
		t.Fatalf("%d events %v, want 8", n, err)
	}
}
