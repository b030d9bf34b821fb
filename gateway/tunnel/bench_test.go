package tunnel

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
)

const benchPayload = 64 << 20

// sink reads a whole upload and answers one byte, so the sender's timing
// covers delivery, not just buffering.
func sink(_ context.Context, c net.Conn) {
	if _, err := io.Copy(io.Discard, c); err == nil {
		_, _ = c.Write([]byte{1})
	}
}

// upload sends benchPayload bytes on c in 32 KiB writes, half-closes and
// waits for the sink's byte.
func upload(b *testing.B, c net.Conn, buf []byte) {
	for sent := 0; sent < benchPayload; sent += len(buf) {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf[:1]); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkTunnelStream moves 64 MiB through one tunnel stream over a real
// loopback TLS 1.3 connection, for several yamux window sizes.
func BenchmarkTunnelStream(b *testing.B) {
	for _, window := range []uint32{256 << 10, 1 << 20, DefaultMaxStreamWindow, 16 << 20} {
		b.Run(fmt.Sprintf("window=%dKiB", window>>10), func(b *testing.B) {
			pki := newPKI(b)
			timing := Timing{MaxStreamWindow: window}
			srv := &Server{Timing: timing}
			p := startProxy(b, pki, srv, "127.0.0.1:0")
			wk := newWorker(b, pki, p.addr(), "c1", "w1", sink)
			wk.Timing = timing
			startWorker(b, wk)
			eventually(b, "worker connected", func() bool { return srv.Connected("c1") })
			buf := make([]byte, 32<<10)
			b.SetBytes(benchPayload)
			cpu0 := cpuTime(b)
			for b.Loop() {
				c, err := srv.Open(context.Background(), "c1")
				if err != nil {
					b.Fatal(err)
				}
				upload(b, c, buf)
				_ = c.Close()
			}
			reportCPU(b, cpu0)
		})
	}
}

// cpuTime is the CPU time this process has used, user and system: both
// ends of the tunnel run in it.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU both ends used per MiB carried since cpu0,
// which the machine's other load does not change much, unlike MB/s.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	mib := float64(b.N) * benchPayload / (1 << 20)
	b.ReportMetric(float64(cpuTime(b)-cpu0)/1e6/mib, "cpu-ms/MiB")
}

// BenchmarkPlainTLS is the baseline: the same upload over one loopback TLS
// 1.3 connection without yamux.
func BenchmarkPlainTLS(b *testing.B) {
	pki := newPKI(b)
	ln := plainSink(b, pki)
	benchPlain(b, pki, ln.Addr().String())
}

// plainSink serves sink on TLS connections until the benchmark ends.
func plainSink(b *testing.B, pki *testPKI) net.Listener {
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{pki.server},
		MinVersion:   tls.VersionTLS13,
	})
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	b.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { sink(context.Background(), c); _ = c.Close() })
		}
	})
	return ln
}

func benchPlain(b *testing.B, pki *testPKI, addr string) {
	buf := make([]byte, 32<<10)
	b.SetBytes(benchPayload)
	cpu0 := cpuTime(b)
	defer reportCPU(b, cpu0)
	for b.Loop() {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pki.pool, MinVersion: tls.VersionTLS13})
		if err != nil {
			b.Fatal(err)
		}
		upload(b, c, buf)
		_ = c.Close()
	}
}

// BenchmarkTunnelStreamWAN repeats BenchmarkTunnelStream through a relay
// adding 10 ms each way (20 ms round trip), where the per-stream window
// bounds throughput to about window/RTT. The plain-TLS run is the baseline.
func BenchmarkTunnelStreamWAN(b *testing.B) {
	const oneWay = 10 * time.Millisecond
	for _, window := range []uint32{256 << 10, 1 << 20, 4 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("window=%dKiB", window>>10), func(b *testing.B) {
			pki := newPKI(b)
			timing := Timing{MaxStreamWindow: window}
			srv := &Server{Timing: timing}
			p := startProxy(b, pki, srv, "127.0.0.1:0")
			relay := startDelayRelay(b, p.addr(), oneWay)
			wk := newWorker(b, pki, relay.ln.Addr().String(), "c1", "w1", sink)
			wk.Timing = timing
			startWorker(b, wk)
			eventually(b, "worker connected", func() bool { return srv.Connected("c1") })
			buf := make([]byte, 32<<10)
			b.SetBytes(benchPayload)
			for b.Loop() {
				c, err := srv.Open(context.Background(), "c1")
				if err != nil {
					b.Fatal(err)
				}
				upload(b, c, buf)
				_ = c.Close()
			}
		})
	}
	b.Run("plainTLS", func(b *testing.B) {
		pki := newPKI(b)
		ln := plainSink(b, pki)
		relay := startDelayRelay(b, ln.Addr().String(), oneWay)
		benchPlain(b, pki, relay.ln.Addr().String())
	})
}
