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
//     over the ops.
//
// cpu-µs/op is the process's CPU per op (user and system).
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
	b.Run("log+index", func(b *testing.B) {
		db, err := sqlite.OpenAudit(ctx, filepath.Join(b.TempDir(), FileName), false)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		if _, err := db.DB().ExecContext(ctx, "PRAGMA synchronous=OFF"); err != nil {
			b.Fatal(err)
		}
		db.DB().SetMaxOpenConns(1) // the pragma is per connection
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
