package locks

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStoreSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	path := Path(t.TempDir())
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	perm := testLock("alice")
	brief := testLock("bob")
	brief.CreatedAt = now
	brief.Expires = now.Add(time.Hour)
	for _, l := range []Lock{perm, brief} {
		if err := s.Add(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.List(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Target.Name != "alice" || got[1].Target.Name != "bob" {
		t.Fatalf("after reopen List = %+v", got)
	}
	if !got[1].Expires.Equal(brief.Expires) || !got[0].CreatedAt.Equal(perm.CreatedAt) || !got[0].Expires.IsZero() {
		t.Fatalf("times not kept: %+v", got)
	}
	if got[0].Reason != perm.Reason || got[0].CreatedBy != perm.CreatedBy {
		t.Fatalf("fields not kept: %+v", got[0])
	}
}

func TestStoreReplaceRemovePrune(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "x?#%.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()

	l := testLock("alice")
	if err := s.Add(ctx, l); err != nil {
		t.Fatal(err)
	}
	l.Reason = "second thoughts"
	if err := s.Add(ctx, l); err != nil {
		t.Fatal(err)
	}
	got, _ := s.List(ctx, now)
	if len(got) != 1 || got[0].Reason != "second thoughts" {
		t.Fatalf("Add did not replace: %+v", got)
	}

	removed, err := s.Remove(ctx, l.Target, now)
	if err != nil || removed.Reason != "second thoughts" {
		t.Fatalf("Remove = %+v, %v", removed, err)
	}
	if _, err := s.Remove(ctx, l.Target, now); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Remove = %v, want ErrNotFound", err)
	}

	old := testLock("carol")
	old.CreatedAt = now.Add(-2 * time.Hour)
	old.Expires = now.Add(-time.Hour)
	if err := s.Add(ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Remove(ctx, old.Target, now); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Remove of expired = %v, want ErrNotFound", err)
	}
	if err := s.Add(ctx, old); err != nil {
		t.Fatal(err)
	}
	got, _ = s.List(ctx, now)
	if len(got) != 0 {
		t.Fatalf("expired lock listed: %+v", got)
	}
	if n, err := countRows(path, `SELECT count(*) FROM locks`); err != nil || n != 0 {
		t.Fatalf("expired lock not pruned: %d rows, %v", n, err)
	}

	bad := testLock("")
	if err := s.Add(ctx, bad); err == nil {
		t.Fatal("Add accepted an invalid lock")
	}
}

func TestOpenUnwritable(t *testing.T) {
	_, err := Open(context.Background(), filepath.Join(t.TempDir(), "missing", "dir", "locks.db"))
	if err == nil {
		t.Fatal("Open in a missing directory succeeded")
	}
}

// countRows reads the file at path beside the store, as an operator's
// sqlite3 would.
func countRows(path, query string) (int, error) {
	p := strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(path)
	db, err := sql.Open("sqlite", "file:"+p+"?mode=ro")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int
	err = db.QueryRow(query).Scan(&n)
	return n, err
}
