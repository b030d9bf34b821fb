package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/limenhq/limen/gateway/store"
)

// TestAuditOnAFullDisk appends batches of every size to an audit file on a
// tmpfs that fills up (and a filler takes what is left), then frees it: an
// Append that returned nil has all its rows in the file, one that failed
// has none. The proxy relays a response only once Append returned nil for
// its record, so a row acknowledged and then missing would be a response
// served unaudited.
func TestAuditOnAFullDisk(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64m"); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root): %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	ctx := context.Background()
	a, err := OpenAudit(ctx, filepath.Join(dir, "audit.db"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer filler.Close()
	data := make([]byte, 700)
	acked := map[string]bool{}
	refused := map[string]bool{}
	seq := 0
	for round := 0; round < 3; round++ {
		// Leave the audit file about 2 MiB to fill.
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		if free := int64(st.Bavail) * st.Bsize; free > 2<<20 {
			if _, err := filler.Write(make([]byte, free-2<<20)); err != nil {
				t.Fatal(err)
			}
		}
		failures := 0
		for i := 0; failures < 40 && i < 100000; i++ {
			n := 1 + i%7 // small batches (one INSERT) and large ones (a transaction)
			rows := make([]store.AuditRecord, n)
			names := make([]string, n)
			for j := range rows {
				seq++
				names[j] = fmt.Sprintf("probe-%d", seq)
				rows[j] = store.AuditRecord{TimeNS: int64(seq), Type: "kube.request", Who: "user:alice", Name: names[j], Cluster: "demo", Data: data}
			}
			err := a.Append(ctx, rows)
			for _, name := range names {
				if err == nil {
					acked[name] = true
				} else {
					refused[name] = true
				}
			}
			if err != nil {
				failures++
				// Take what the failure left free, as the chaos test does.
				_, _ = filler.Write(make([]byte, 64<<10))
				_, _ = filler.Write(make([]byte, 4096))
				_, _ = filler.Write(make([]byte, 1))
			}
		}
		if failures == 0 {
			t.Fatalf("round %d: the disk never filled", round)
		}
		// Free the disk, and append again.
		if err := filler.Truncate(0); err != nil {
			t.Fatal(err)
		}
		if _, err := filler.Seek(0, 0); err != nil {
			t.Fatal(err)
		}
		if err := a.Append(ctx, []store.AuditRecord{{TimeNS: int64(seq + 1), Type: "kube.request", Name: "after", Data: data}}); err != nil {
			var st syscall.Statfs_t
			_ = syscall.Statfs(dir, &st)
			ls, _ := os.ReadDir(dir)
			var sizes []string
			for _, e := range ls {
				fi, _ := e.Info()
				sizes = append(sizes, fmt.Sprintf("%s=%d", e.Name(), fi.Size()))
			}
			t.Fatalf("round %d: append after the disk was freed (%d bytes free; %v): %v", round, st.Bavail*uint64(st.Bsize), sizes, err)
		}
		seq++
	}
	got, err := a.Search(ctx, store.AuditQuery{Limit: 1 << 30})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	stored := map[string]int{}
	for _, r := range got {
		stored[r.Name]++
	}
	missing, extra := 0, 0
	for name := range acked {
		if stored[name] != 1 {
			missing++
			if missing <= 5 {
				t.Errorf("%s: Append returned nil, the file holds it %d times", name, stored[name])
			}
		}
	}
	for name := range refused {
		if stored[name] != 0 {
			extra++
		}
	}
	t.Logf("%d rows acknowledged, %d refused; %d acknowledged rows missing, %d refused rows stored", len(acked), len(refused), missing, extra)
	if missing > 0 {
		t.Fatalf("%d acknowledged rows are not in the audit file", missing)
	}
}
