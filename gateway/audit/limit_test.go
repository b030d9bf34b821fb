package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestAuditLimitRefusesWhenFull: a database at its size limit refuses new
// events with an error that names the limit and what to do, and wraps
// ErrUnavailable so that every caller fails closed; it stores nothing more,
// Room says so before anything is forwarded, and deleting old events makes
// room again without a restart.
func TestAuditLimitRefusesWhenFull(t *testing.T) {
	const limit = 256 << 10
	s, path := openTemp(t, Options{MaxBytes: limit})
	ctx := context.Background()
	if err := s.Room(ctx); err != nil {
		t.Fatalf("an empty database has no room: %v", err)
	}
	var refused error
	stored := 0
	for i := 0; i < 10000 && refused == nil; i++ {
		ev := kubeEvent(fmt.Sprintf("user%d", i), "prod", "get", t0)
		if refused = s.Emit(ctx, ev); refused == nil {
			stored++
		}
	}
	if refused == nil {
		t.Fatalf("%d events stored in a database limited to %d bytes: the limit is ignored", stored, limit)
	}
	if !errors.Is(refused, ErrFull) || !errors.Is(refused, ErrUnavailable) {
		t.Fatalf("refusal %v: want ErrFull and ErrUnavailable", refused)
	}
	for _, want := range []string{path, "256 KiB limit", "audit-max-bytes", "delete or archive old events"} {
		if !strings.Contains(refused.Error(), want) {
			t.Errorf("refusal %q does not say %q", refused, want)
		}
	}
	// Refused means not stored, and it stays so.
	if err := s.Emit(ctx, kubeEvent("late", "prod", "get", t0)); !errors.Is(err, ErrFull) {
		t.Fatalf("the next event: %v, want ErrFull", err)
	}
	u, err := s.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if u.Events != int64(stored) || u.Max != limit || u.Used == 0 {
		t.Fatalf("usage %+v, want the %d stored events against the %d-byte limit", u, stored, limit)
	}
	if err := s.Room(ctx); !errors.Is(err, ErrFull) {
		t.Fatalf("Room of a full database: %v, want ErrFull", err)
	}

	// An operator deletes old events: their pages are reused.
	if _, err := sqlDB(s).ExecContext(ctx, "DELETE FROM events WHERE id <= ?", stored/2); err != nil {
		t.Fatal(err)
	}
	if err := s.Room(ctx); err != nil {
		t.Fatalf("Room after deleting half the events: %v", err)
	}
	if err := s.Emit(ctx, kubeEvent("after", "prod", "get", t0)); err != nil {
		t.Fatalf("an event after deleting half: %v", err)
	}
}

// TestAuditLimitDefault: a store opened without a limit has the default.
func TestAuditLimitDefault(t *testing.T) {
	s, _ := openTemp(t, Options{})
	u, err := s.Usage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if u.Max != DefaultMaxBytes || u.Used <= 0 || u.File <= 0 {
		t.Fatalf("usage %+v, want the default limit and the schema in use", u)
	}
}
