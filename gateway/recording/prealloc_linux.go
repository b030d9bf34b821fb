package recording

import (
	"errors"
	"os"
	"syscall"
)

// preallocate gives f disk space for [off, off+n), growing its size (the
// zeros past the last line are cut by Commit, or by recovery after a
// crash). It fails as a write would, with ENOSPC on a full disk or EFBIG
// past the file size limit. A file system without fallocate returns an
// error that is errors.ErrUnsupported.
func preallocate(f *os.File, off, n int64) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := sc.Control(func(fd uintptr) {
		for {
			ferr = syscall.Fallocate(int(fd), 0, off, n)
			if !errors.Is(ferr, syscall.EINTR) {
				return
			}
		}
	}); err != nil {
		return err
	}
	if errors.Is(ferr, syscall.EOPNOTSUPP) || errors.Is(ferr, syscall.ENOSYS) {
		return errors.ErrUnsupported
	}
	if ferr != nil {
		return &os.PathError{Op: "fallocate", Path: f.Name(), Err: ferr}
	}
	return nil
}

// datasync flushes f's data, and the metadata needed to read it back, to
// the disk (fdatasync).
func datasync(f *os.File) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := sc.Control(func(fd uintptr) {
		for {
			serr = syscall.Fdatasync(int(fd))
			if !errors.Is(serr, syscall.EINTR) {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: serr}
	}
	return nil
}
