package recording

import (
	"encoding/base64"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// benchChunk is the size of the output chunks the benchmarks record: what
// the kubelet's copy of a command's output hands the stream at a time.
const benchChunk = 32 << 10

// benchRotate is how large a spooled recording grows before the benchmark
// starts a new one, so that a long run does not fill the disk.
const benchRotate = 64 << 20

// benchOutputs are the kinds of output the benchmarks record, 4 MiB each.
func benchOutputs() []struct {
	name string
	data []byte
} {
	const size = 4 << 20
	rnd := rand.New(rand.NewChaCha8([32]byte{1}))
	random := make([]byte, size)
	for i := range random {
		random[i] = byte(rnd.Uint32())
	}
	// base64 as the tool prints it: lines of 76 characters.
	enc := base64.StdEncoding.EncodeToString(random[:size*3/4])
	b64 := make([]byte, 0, size+size/76+1)
	for len(enc) > 0 {
		n := min(76, len(enc))
		b64 = append(append(b64, enc[:n]...), '\n')
		enc = enc[n:]
	}
	seq := make([]byte, 0, size)
	for i := 1; len(seq) < size; i++ {
		seq = append(strconv.AppendInt(seq, int64(i), 10), '\n')
	}
	return []struct {
		name string
		data []byte
	}{
		{"text=seq", seq[:size]},
		{"text=base64", b64[:size]},
		{"random", random},
	}
}

// BenchmarkWriterStdout records output through Writer.Stdout in 32 KiB
// chunks: into io.Discard (escaping and the Writer's own work) and into a
// spool file (everything a recorded exec pays, but the disk: run it with
// TMPDIR on a tmpfs to leave the disk out, or on the spool's disk to
// include it). MB/s is output recorded per second; cpu-MB/s is output
// recorded per second of CPU the process used, on all its threads (what
// the worker pays, whatever else the machine runs); rec/out is the size of
// the recording over the size of the output.
func BenchmarkWriterStdout(b *testing.B) {
	for _, out := range benchOutputs() {
		for _, sink := range []string{"discard", "spool"} {
			b.Run(fmt.Sprintf("%s/%s", out.name, sink), func(b *testing.B) {
				var spool *Spool
				if sink == "spool" {
					var err error
					if spool, err = OpenSpool(b.TempDir()); err != nil {
						b.Fatal(err)
					}
				}
				files := 0
				var f *File
				open := func() *Writer {
					if spool == nil {
						return NewCappedWriter(io.Discard, meta(), math.MaxInt64)
					}
					files++
					var err error
					if f, err = spool.Create(fmt.Sprintf("bench-%d", files)); err != nil {
						b.Fatal(err)
					}
					return NewCappedWriter(f, meta(), math.MaxInt64)
				}
				w := open()
				var recorded int64 // bytes of recordings already rotated out
				b.SetBytes(benchChunk)
				cpu0 := cpuTime(b)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					off := (i * benchChunk) % len(out.data)
					if err := w.Stdout(out.data[off : off+benchChunk]); err != nil {
						b.Fatal(err)
					}
					if w.n >= benchRotate && f != nil {
						if err := f.Discard(); err != nil {
							b.Fatal(err)
						}
						recorded += w.n
						w = open()
					}
				}
				b.StopTimer()
				cpu := cpuTime(b) - cpu0
				b.ReportMetric(float64(b.N)*benchChunk/1e6/cpu.Seconds(), "cpu-MB/s")
				recorded += w.n
				b.ReportMetric(float64(recorded)/(float64(b.N)*benchChunk), "rec/out")
				if f != nil {
					if err := f.Discard(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAppendJSONString is the escaping alone, on 32 KiB chunks.
func BenchmarkAppendJSONString(b *testing.B) {
	for _, out := range benchOutputs() {
		b.Run(out.name, func(b *testing.B) {
			var dst []byte
			b.SetBytes(benchChunk)
			cpu0 := cpuTime(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				off := (i * benchChunk) % len(out.data)
				dst = appendJSONString(dst[:0], out.data[off:off+benchChunk])
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)*benchChunk/1e6/(cpuTime(b)-cpu0).Seconds(), "cpu-MB/s")
		})
	}
}
