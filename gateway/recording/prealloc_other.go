//go:build !linux

package recording

import (
	"errors"
	"os"
)

// preallocate is not available here: a full disk fails a later write.
func preallocate(*os.File, int64, int64) error { return errors.ErrUnsupported }

// datasync flushes f to the disk (fsync; fdatasync is Linux's).
func datasync(f *os.File) error { return f.Sync() }
