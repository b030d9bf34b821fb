package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/limenhq/limen/gateway/store"
	"github.com/limenhq/limen/gateway/store/sqlite"
	"github.com/limenhq/limen/gateway/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Backend { return sqlite.New(t.TempDir()) })
}

// previousRelease is the schema and a row of each file as the release
// before versioned migrations wrote them: no user_version.
var previousRelease = map[string]string{
	sqlite.UsersFile: `CREATE TABLE users (name TEXT PRIMARY KEY, hash BLOB NOT NULL, traits TEXT NOT NULL,
		created INTEGER NOT NULL, updated INTEGER NOT NULL);
		INSERT INTO users VALUES ('alice', x'00', '{}', 1, 1)`,
	sqlite.LocksFile: `CREATE TABLE locks (kind TEXT NOT NULL, name TEXT NOT NULL, reason TEXT NOT NULL,
		expires_ns INTEGER NOT NULL, created_by TEXT NOT NULL, created_ns INTEGER NOT NULL, PRIMARY KEY (kind, name));
		INSERT INTO locks VALUES ('user', 'mallory', 'incident', 0, 'user:root', 1)`,
	sqlite.AuditFile: `CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, time_ns INTEGER NOT NULL,
		type TEXT NOT NULL, who TEXT NOT NULL, name TEXT NOT NULL, cluster TEXT NOT NULL, verb TEXT NOT NULL,
		session_id TEXT NOT NULL, data TEXT NOT NULL);
		CREATE INDEX events_time ON events (time_ns);
		INSERT INTO events (time_ns, type, who, name, cluster, verb, session_id, data)
			VALUES (1, 'auth.login', 'user:alice', 'alice', '', '', '', '{"type":"auth.login"}')`,
}

func writeFile(t *testing.T, path, stmts string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(stmts); err != nil {
		t.Fatal(err)
	}
}

func userVersion(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestPreviousReleaseMigratesForward: a data directory the previous release
// wrote opens, keeps its rows and is brought to the current version.
func TestPreviousReleaseMigratesForward(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for name, stmts := range previousRelease {
		writeFile(t, filepath.Join(dir, name), stmts)
	}
	b := sqlite.New(dir)
	defer b.Close()
	u, err := b.Users(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := u.Get(ctx, "alice"); err != nil || r.Created != 1 {
		t.Fatalf("alice after migration: %+v %v", r, err)
	}
	l, err := b.Locks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ls, err := l.List(ctx, 2); err != nil || len(ls) != 1 || ls[0].Name != "mallory" {
		t.Fatalf("locks after migration: %+v %v", ls, err)
	}
	a, err := b.Audit(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := a.Count(ctx); err != nil || n != 1 {
		t.Fatalf("events after migration: %d %v", n, err)
	}
	if err := a.Append(ctx, []store.AuditRecord{{TimeNS: 2, Type: "auth.login", Data: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	for name := range previousRelease {
		if v := userVersion(t, filepath.Join(dir, name)); v != 1 {
			t.Errorf("%s: user_version %d after migration, want 1", name, v)
		}
	}
}

// TestNewerSchemaRefused: a file a newer Limen migrated is refused, by
// name, read-only too.
func TestNewerSchemaRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, sqlite.AuditFile), previousRelease[sqlite.AuditFile]+"; PRAGMA user_version = 7")
	for _, readOnly := range []bool{false, true} {
		_, err := sqlite.New(dir).Audit(ctx, readOnly)
		if !errors.Is(err, store.ErrSchemaNewer) {
			t.Fatalf("read-only %v: %v, want ErrSchemaNewer", readOnly, err)
		}
		t.Logf("read-only %v: %v", readOnly, err)
	}
	writeFile(t, filepath.Join(dir, sqlite.UsersFile), "PRAGMA user_version = 2")
	if _, err := sqlite.OpenUsers(ctx, filepath.Join(dir, sqlite.UsersFile)); !errors.Is(err, store.ErrSchemaNewer) {
		t.Fatalf("users: %v, want ErrSchemaNewer", err)
	}
}

// TestConcurrentOpenMigratesOnce: processes opening one new file at once
// (here: independent connections) all succeed, and the schema is made once.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const n = 6
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for range n {
		wg.Go(func() {
			a, err := sqlite.OpenAudit(ctx, filepath.Join(dir, sqlite.AuditFile), false)
			if err == nil {
				err = a.Append(ctx, []store.AuditRecord{{TimeNS: 1, Type: "auth.login", Data: []byte(`{}`)}})
				a.Close()
			}
			errs <- err
		})
		wg.Go(func() {
			b, err := sqlite.OpenBots(ctx, filepath.Join(dir, sqlite.BotsFile))
			if err == nil {
				b.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent open: %v", err)
		}
	}
	if v := userVersion(t, filepath.Join(dir, sqlite.AuditFile)); v != 1 {
		t.Fatalf("user_version %d, want 1", v)
	}
}

func BenchmarkAuditOverlap(b *testing.B) {
	storetest.BenchAuditOverlap(b, func(b *testing.B) store.Backend { return sqlite.New(b.TempDir()) })
}

// TestAuditAppendIsAllOrNothing: a batch is stored whole or not at all,
// whether it goes as one multi-row INSERT (up to four rows) or in an
// explicit transaction: a row the table refuses (no data: NOT NULL) takes
// the rows before it down with it.
func TestAuditAppendIsAllOrNothing(t *testing.T) {
	ctx := context.Background()
	a, err := sqlite.OpenAudit(ctx, filepath.Join(t.TempDir(), sqlite.AuditFile), false)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	row := func(i int) store.AuditRecord {
		return store.AuditRecord{TimeNS: int64(i + 1), Type: "kube.request", SessionID: fmt.Sprint(i), Data: []byte(`{}`)}
	}
	var stored int64
	for _, n := range []int{1, 2, 4, 5, 9} {
		good := make([]store.AuditRecord, n)
		for i := range good {
			good[i] = row(i)
		}
		if err := a.Append(ctx, good); err != nil {
			t.Fatalf("%d rows: %v", n, err)
		}
		stored += int64(n)
		bad := slices.Clone(good)
		bad[n-1].Data = nil
		if err := a.Append(ctx, bad); err == nil {
			t.Fatalf("%d rows, the last without data: stored", n)
		}
		if got, err := a.Count(ctx); err != nil || got != stored {
			t.Fatalf("after a refused batch of %d: %d rows (%v), want %d", n, got, err, stored)
		}
	}
}
