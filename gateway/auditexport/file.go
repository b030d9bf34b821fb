package auditexport

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// File appends batches to a file as JSON lines, one audit.k8s.io/v1 Event a
// line, as the API server's log backend writes them (or to a pipe such as
// /dev/stdout, for a container's log collector). The file is opened for
// each batch (a log rotator may move it away; the next batch creates it
// again) and synced before Deliver returns. A batch that fails half
// written is cut off again, so that a retry never leaves a broken line.
type File struct {
	path string
}

// NewFile returns the sink for --audit-export-file path.
func NewFile(path string) *File { return &File{path: path} }

// Name is "file".
func (f *File) Name() string { return "file" }

// Deliver appends batch and syncs the file.
func (f *File) Deliver(_ context.Context, batch []auditv1.Event) (err error) {
	out, err := os.OpenFile(f.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("audit export file: %w", err)
	}
	fi, err := out.Stat()
	if err != nil {
		out.Close()
		return fmt.Errorf("audit export file: %w", err)
	}
	// A pipe or terminal (/dev/stdout, for a log collector) cannot be
	// synced or cut back; what was written to it is gone to the reader.
	regular := fi.Mode().IsRegular()
	defer func() {
		if err != nil && regular {
			_ = out.Truncate(fi.Size()) // no half batch stays behind
		}
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("audit export file: %w", cerr)
		}
	}()
	w := bufio.NewWriterSize(out, 64<<10)
	enc := json.NewEncoder(w) // one object a line
	for i := range batch {
		if err := enc.Encode(&batch[i]); err != nil {
			return fmt.Errorf("audit export file: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("audit export file: %w", err)
	}
	if !regular {
		return nil
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("audit export file: %w", err)
	}
	return nil
}
