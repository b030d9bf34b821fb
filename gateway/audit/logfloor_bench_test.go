package audit

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/limenhq/limen/gateway/store"
	"github.com/limenhq/limen/gateway/store/sqlite"
)

// BenchmarkAuditLogFloor answers issue 33's question of what an
// append-only log as the durable path would save, without building it: the
// fail-closed tests (TestEmitFailsClosed's "table gone" and "database closed
// under the batcher", e2e TestStreamNothingStartsUnaudited) require the
// SQLite insert on the acknowledged path, so the log could only add to it.
// Each op is one GET's audit: its kube.sent and the previous request's
// kube.request, as BenchmarkRequestAudit/overlapped commits them together.
//
//   - sqlite-full: today's durable path, one two-row INSERT with
//     synchronous=FULL (the WAL's frames, then fsync);
//   - log: the records, CRC-framed, in one write(2) and one fdatasync to
//     an append-only file, with no index at all;
//   - log+index: the log, and the SQLite index fed from it in batches of
//     256 rows without a sync of its own (synchronous=OFF), its cost spread
//     over the ops;
//   - log+index-each: the log, and each op's rows inserted into the index
//     (synchronous=OFF) before the op is acknowledged: the only log design
//     that keeps those tests as they are, since a dropped table must still
//     refuse the event.
//
// cpu-µs/op is the process's CPU per op (user and system). On the 2-core
// dev VM (2026-12-03, -benchtime 2000x -count 2): sqlite-full 125–128,
// log 51–62, log+index-each 126–137, log+index 71–76. The log saves CPU
// only when the index leaves the acknowledged path.
func BenchmarkAuditLogFloor(b *testing.B) {
	ctx := context.Background()
	rows := func(i int) []store.AuditRecord {
		sent := sentEvent(sessionID(i), "GET", "get", "", t0)
		out := outcomeOf(sentEvent(sessionID(i-1), "GET", "get", "", t0))
		var rs []store.AuditRecord
		for _, e := range []Event{sent, out} {
			data, err := EncodeEvent(e)
			if err != nil {
				b.Fatal(err)
			}
			rs = append(rs, record(e, data))
		}
		return rs
	}
	b.Run("sqlite-full", func(b *testing.B) {
		db, err := sqlite.OpenAudit(ctx, filepath.Join(b.TempDir(), FileName), false)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		cpu, i := cpuTime(), 0
		for b.Loop() {
			if err := db.Append(ctx, rows(i)); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	})
	logOnly := func(b *testing.B, index func([]store.AuditRecord)) {
		f, err := os.OpenFile(filepath.Join(b.TempDir(), "audit.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		var frame []byte
		cpu, i := cpuTime(), 0
		for b.Loop() {
			rs := rows(i)
			i++
			frame = frame[:0]
			for _, r := range rs {
				frame = binary.BigEndian.AppendUint32(frame, uint32(len(r.Data)))
				frame = binary.BigEndian.AppendUint32(frame, crc32.Checksum(r.Data, castagnoli))
				frame = append(frame, r.Data...)
			}
			if _, err := f.Write(frame); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil { // Go's Sync is fsync; fdatasync would be cheaper still
				b.Fatal(err)
			}
			if index != nil {
				index(rs)
			}
		}
		b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	}
	b.Run("log", func(b *testing.B) { logOnly(b, nil) })
	unsynced := func(b *testing.B) *sqlite.Audit {
		db, err := sqlite.OpenAudit(ctx, filepath.Join(b.TempDir(), FileName), false)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		db.DB().SetMaxOpenConns(1) // the pragma is per connection
		if _, err := db.DB().ExecContext(ctx, "PRAGMA synchronous=OFF"); err != nil {
			b.Fatal(err)
		}
		return db
	}
	b.Run("log+index-each", func(b *testing.B) {
		db := unsynced(b)
		logOnly(b, func(rs []store.AuditRecord) {
			if err := db.Append(ctx, rs); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("log+index", func(b *testing.B) {
		db := unsynced(b)
		var pending []store.AuditRecord
		logOnly(b, func(rs []store.AuditRecord) {
			if pending = append(pending, rs...); len(pending) >= 256 {
				if err := db.Append(ctx, pending); err != nil {
					b.Fatal(err)
				}
				pending = pending[:0]
			}
		})
	})
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)
