package stress

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// stream is the data of one run: n bytes of ChaCha8 keyed by the run's
// seed. Every run sends different bytes, so data crossing from one
// concurrent stream into another shows up as a wrong checksum, and each
// run's SHA-256 is known before it starts. A seed with textSeed set maps
// each byte to one of 64 printable characters: Limen records exec output
// as asciicast, where text takes its own size and binary about four times
// as much (bytes that are not UTF-8 become \ufffd).
type stream struct {
	rng  *rand.ChaCha8
	text bool
	left int64
}

// textSeed marks a seed whose data is printable text.
const textSeed = 1 << 63

const textAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

func newStream(seed uint64, n int64) *stream {
	var key [32]byte
	copy(key[:], "limen-stress")
	binary.BigEndian.PutUint64(key[24:], seed)
	return &stream{rng: rand.NewChaCha8(key), text: seed&textSeed != 0, left: n}
}

func (s *stream) Read(p []byte) (int, error) {
	if s.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > s.left {
		p = p[:s.left]
	}
	n, _ := s.rng.Read(p)
	if s.text {
		for i, b := range p[:n] {
			p[i] = textAlphabet[b&63]
		}
	}
	s.left -= int64(n)
	return n, nil
}

// expectedSum is the SHA-256 of a run's data.
func expectedSum(seed uint64, n int64) [32]byte {
	t := newTally()
	_, _ = io.CopyBuffer(t, newStream(seed, n), make([]byte, 256<<10))
	return t.sum()
}

// tally counts and hashes what is written to it.
type tally struct {
	h hash.Hash
	n int64
}

func newTally() *tally { return &tally{h: sha256.New()} }

func (t *tally) Write(p []byte) (int, error) {
	t.h.Write(p)
	t.n += int64(len(p))
	return len(p), nil
}

func (t *tally) sum() (s [32]byte) {
	copy(s[:], t.h.Sum(nil))
	return s
}

// tallyFile counts and hashes a file; a missing file is 0 bytes.
func tallyFile(name string) (int64, [32]byte, error) {
	t := newTally()
	f, err := os.Open(name)
	if os.IsNotExist(err) {
		return 0, t.sum(), nil
	}
	if err != nil {
		return 0, t.sum(), err
	}
	defer f.Close()
	_, err = io.Copy(t, f)
	return t.n, t.sum(), err
}

// writeStreamFile writes a run's data to a new file.
func writeStreamFile(name string, seed uint64, n int64) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	_, err = io.CopyBuffer(f, newStream(seed, n), make([]byte, 256<<10))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// The helpers this test binary serves as, named by its first argument.
const (
	// genArg SEED BYTES EXIT writes the run's data to stdout and exits
	// with EXIT: the pod's command for exec output.
	genArg = "limen-stress-gen"
	// burnArg THREADS SECONDS spins THREADS threads for at most SECONDS:
	// the CPU-burning neighbour.
	burnArg = "limen-stress-burn"
)

// helperMain runs a helper named by args[0] and returns its exit code, or
// false when args name none (a normal test run).
func helperMain(args []string) (int, bool) {
	if len(args) == 0 {
		return 0, false
	}
	nums := func(want int) ([]uint64, error) {
		if len(args)-1 != want {
			return nil, fmt.Errorf("want %d arguments, got %q", want, args[1:])
		}
		var out []uint64
		for _, a := range args[1:] {
			n, err := strconv.ParseUint(a, 10, 64)
			if err != nil {
				return nil, err
			}
			out = append(out, n)
		}
		return out, nil
	}
	switch args[0] {
	case genArg:
		n, err := nums(3)
		if err == nil {
			w := bufio.NewWriterSize(os.Stdout, 256<<10)
			if _, err = io.Copy(w, newStream(n[0], int64(n[1]))); err == nil {
				err = w.Flush()
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", genArg, err)
			return 1, true
		}
		return int(n[2]), true
	case burnArg:
		n, err := nums(2)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", burnArg, err)
			return 1, true
		}
		burn(int(n[0]), time.Duration(n[1])*time.Second)
		return 0, true
	}
	return 0, false
}

// burn keeps threads CPUs busy for d.
func burn(threads int, d time.Duration) {
	runtime.GOMAXPROCS(threads + 1)
	for range threads {
		go func() {
			x := uint64(1)
			for {
				x = x*6364136223846793005 + 1442695040888963407
			}
		}()
	}
	time.Sleep(d) // the neighbour's lifetime bound, should the test never stop it
}

// startNeighbour starts the CPU-burning neighbour for the rest of the test
// (bounded by the test's deadline, an hour without one) and stops it when
// the test ends, logging how much CPU it took.
func startNeighbour(t *testing.T, threads int) {
	t.Helper()
	if threads == 0 {
		t.Logf("no CPU neighbour (%s=0)", envBurn)
		return
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	life := time.Hour
	if d, ok := t.Deadline(); ok {
		life = time.Until(d)
	}
	cmd := exec.Command(self, burnArg, strconv.Itoa(threads), strconv.Itoa(int(life.Seconds())+1))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the CPU neighbour: %v", err)
	}
	started := time.Now()
	t.Logf("CPU neighbour: pid %d spinning %d threads", cmd.Process.Pid, threads)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		wall := time.Since(started)
		cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		t.Logf("CPU neighbour stopped: it used %.0f s of CPU in %.0f s (%.2f cores)", cpu.Seconds(), wall.Seconds(), cpu.Seconds()/wall.Seconds())
	})
}
