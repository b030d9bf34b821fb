package auditexport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"encoding/json"

	"github.com/limenhq/limen/gateway/internal/strictjson"
	"github.com/limenhq/limen/gateway/store"
)

// Cursors keeps each sink's cursor: FileCursors in one proxy's data
// directory, or StoreCursors in the database several proxies share (one of
// them exports at a time, under a lease; the next resumes where it
// stopped).
type Cursors interface {
	Read(ctx context.Context, sink string) (int64, error)
	Write(ctx context.Context, sink string, seq int64) error
}

// FileCursors are cursor files in DataDir (CursorPath).
type FileCursors struct{ DataDir string }

func (c FileCursors) Read(_ context.Context, sink string) (int64, error) {
	return ReadCursor(CursorPath(c.DataDir, sink))
}

func (c FileCursors) Write(_ context.Context, sink string, seq int64) error {
	return WriteCursor(CursorPath(c.DataDir, sink), seq)
}

// StoreCursors are the shared store's cursors.
type StoreCursors struct{ Store store.ExportCursors }

func (c StoreCursors) Read(ctx context.Context, sink string) (int64, error) {
	seq, err := c.Store.ExportCursor(ctx, sink)
	if err != nil {
		return 0, fmt.Errorf("audit export cursor of %s in the database: %w", sink, err)
	}
	return seq, nil
}

func (c StoreCursors) Write(ctx context.Context, sink string, seq int64) error {
	if err := c.Store.SetExportCursor(ctx, sink, seq); err != nil {
		return fmt.Errorf("audit export cursor of %s in the database: %w", sink, err)
	}
	return nil
}

// The durable cursor: per sink, the sequence number of the last event the
// receiver accepted, in a small file beside the audit database
// (DATA-DIR/audit-export/SINK.cursor). It is written, synced and renamed
// into place after each accepted batch, so that a restart resumes after
// the last batch known to be delivered: a crash between the receiver's
// answer and the rename delivers that batch again (at least once).

// CursorDir is the directory of the cursors in the proxy's data directory.
func CursorDir(dataDir string) string { return filepath.Join(dataDir, "audit-export") }

// CursorPath is the cursor file of sink (Sink.Name) in dataDir.
func CursorPath(dataDir, sink string) string {
	return filepath.Join(CursorDir(dataDir), sink+".cursor")
}

type cursorFile struct {
	Seq int64 `json:"seq"`
}

// ReadCursor returns the sequence number stored at path; a missing file is
// 0 (nothing delivered yet: the export starts with the oldest event kept).
func ReadCursor(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("audit export cursor: %w", err)
	}
	seq, err := parseCursor(b)
	if err != nil {
		return 0, fmt.Errorf("audit export cursor %s: %w; delete it to export again from the oldest event kept", path, err)
	}
	return seq, nil
}

func parseCursor(b []byte) (int64, error) {
	var c cursorFile
	if err := strictjson.Unmarshal(bytes.TrimSpace(b), &c); err != nil {
		return 0, err
	}
	if c.Seq < 0 {
		return 0, fmt.Errorf("seq %d is negative", c.Seq)
	}
	return c.Seq, nil
}

// WriteCursor stores seq at path durably: a synced temporary file renamed
// over the old one, and the directory synced.
func WriteCursor(path string, seq int64) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("audit export cursor: %w", err)
	}
	b, _ := json.Marshal(cursorFile{Seq: seq})
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("audit export cursor: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		if d, derr := os.Open(dir); derr == nil {
			err = d.Sync()
			d.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("audit export cursor %s: %w", path, err)
	}
	return nil
}
