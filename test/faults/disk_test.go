package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// diskSize is each small disk: room for the stores a gateway starts with
// and some minutes of load, little enough to fill in a blink.
const diskSize = 48 << 20

// TestDiskFull fills, under load, the disk of the audit store (the
// proxy's data directory), of the recording spool (the worker's) and of
// the recording store, each a tmpfs of its own, then frees it. Audit full
// is fail-closed (DESIGN §2): requests are refused with 503 and a message
// naming the audit trail, none is served unaudited. Spool full: exec is
// refused or ended, with a message, other requests go on. Store full:
// uploads wait in the spool, nothing is refused. Then service returns
// without a restart and nothing acknowledged is lost.
func TestDiskFull(t *testing.T) {
	needFull(t)
	for _, tc := range []struct {
		name string
		disk func(*setup) *int64
		dir  func(s *setup) string
		// refusal is what a refused GET says while full ("": GETs go on).
		refusal string
		// execRefused: new execs fail while full.
		execRefused bool
	}{
		{"audit", func(s *setup) *int64 { return &s.proxyDisk }, func(s *setup) string { return filepath.Join(s.scratchDir, "proxy") },
			"audit trail", false},
		{"spool", func(s *setup) *int64 { return &s.workerDisk }, func(s *setup) string { return filepath.Join(s.scratchDir, "worker") },
			"", true},
		{"recording-store", func(s *setup) *int64 { return &s.recordingDisk }, func(s *setup) string { return s.recordingStore },
			"", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &setup{}
			*tc.disk(s) = diskSize
			env := startGateway(t, s)
			kc, err := env.Login(context.Background(), "alice")
			if err != nil {
				t.Fatal(err)
			}
			l := startLoad(t, env, kc)
			time.Sleep(5 * time.Second) // the load under way, an exec recorded
			filled := time.Now()
			fl := fill(t, tc.dir(s))
			free := fl.free
			saw := fmt.Sprintf("disk filled (%d bytes free left)", free)
			hold := 15 * time.Second
			if tc.refusal != "" {
				after := l.refusedWithin(t, filled, 15*time.Second, tc.refusal)
				saw += fmt.Sprintf("; the first GET refused with %q %s after", tc.refusal, after.Round(time.Millisecond))
			}
			time.Sleep(hold)
			served, refused := l.served(filled, time.Now())
			if tc.refusal == "" && refused > 0 {
				t.Errorf("%d GETs refused while the %s disk was full (%v): only streams that need the disk may fail", refused, tc.name, l.refusals(filled))
			}
			execs := l.execSummary(filled)
			saw += fmt.Sprintf("; while full: %d GETs served, %d refused (%v); execs: %s", served, refused, l.refusals(filled), execs)
			if tc.execRefused && !anyExecFailed(l, filled) {
				t.Errorf("every exec went on while the spool's disk was full: %s", execs)
			}
			fl.stop()
			freed := time.Now()
			back := l.recovered(t, freed, 30*time.Second)
			execBack := l.execBack(t, freed, 30*time.Second)
			time.Sleep(6 * time.Second) // an exec recorded whole after the fault
			v := checkInvariants(t, l, invariantsOpts{user: "alice", proxyDir: env.ProxyDataDir(), recordingStore: s.recordingStore,
				recordingWait: 90 * time.Second})
			report(t, figures{scenario: "disk-full/" + tc.name, saw: saw, recovered: back, v: v,
				extra: fmt.Sprintf("; exec back %s after the disk was freed", execBack.Round(time.Millisecond))})
		})
	}
}

// filler keeps a file system full: it writes a file until no room is
// left, and goes on taking whatever room is freed (a recording's
// preallocated tail cut at its end, say) until stopped, which deletes the
// file.
type filler struct {
	path string
	free uint64 // bytes the file system reports free once full
	done chan struct{}
	wg   sync.WaitGroup
}

// fill fills dir's file system and keeps it full until stop.
func fill(t *testing.T, dir string) *filler {
	t.Helper()
	fl := &filler{path: filepath.Join(dir, "fill-the-disk"), done: make(chan struct{})}
	f, err := os.Create(fl.path)
	if err != nil {
		t.Fatal(err)
	}
	if err := topUp(f); err != nil {
		t.Fatalf("fill %s: %v", dir, err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	fl.free = st.Bavail * uint64(st.Bsize)
	fl.wg.Go(func() {
		defer f.Close()
		for {
			select {
			case <-fl.done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			_ = topUp(f)
		}
	})
	t.Cleanup(fl.stop)
	return fl
}

// stop frees the room: the filling ends and the file is deleted.
func (fl *filler) stop() {
	select {
	case <-fl.done:
		return
	default:
	}
	close(fl.done)
	fl.wg.Wait()
	_ = os.Remove(fl.path)
}

// topUp appends to f until the disk has no room left.
func topUp(f *os.File) error {
	chunk := make([]byte, 1<<20)
	for len(chunk) >= 512 {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				return err
			}
			chunk = chunk[:len(chunk)/2]
		}
	}
	return nil
}

// anyExecFailed reports whether an exec started since from ended short of
// its lines or with an error.
func anyExecFailed(l *load, from time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.execs {
		if r.end.After(from) && (r.exit != 0 || len(r.lines) < execTicks) {
			return true
		}
	}
	return false
}
