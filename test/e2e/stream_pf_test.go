package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/test/cluster/clustertest"
)

// transferSize is what port-forward moves each way.
const transferSize = 100 << 20

// pattern is the data sent both ways: a random MiB, repeated.
var pattern = func() []byte {
	b := make([]byte, 1<<20)
	r := rand.NewChaCha8([32]byte{'l', 'i', 'm', 'e', 'n'})
	_, _ = r.Read(b)
	return b
}()

// writePattern writes n bytes of the pattern to w.
func writePattern(w io.Writer, n int64) error {
	for n > 0 {
		k := min(n, int64(len(pattern)))
		if _, err := w.Write(pattern[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

func patternSum(n int64) []byte {
	h := sha256.New()
	_ = writePattern(h, n)
	return h.Sum(nil)
}

// serveSink is the pod's port: per connection it reads an 8-byte length N,
// N bytes it hashes, answers the 32-byte SHA-256, then sends N pattern bytes.
func serveSink(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var hdr [8]byte
				if _, err := io.ReadFull(c, hdr[:]); err != nil {
					return
				}
				n := int64(binary.BigEndian.Uint64(hdr[:]))
				h := sha256.New()
				if _, err := io.CopyN(h, c, n); err != nil {
					return
				}
				if _, err := c.Write(h.Sum(nil)); err != nil {
					return
				}
				_ = writePattern(c, n)
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// transfer moves n bytes each way through addr, checks both checksums and
// returns the MiB/s of the upload and the download.
func transfer(t *testing.T, addr string, n int64) (up, down float64) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial port-forward: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Minute))
	want := patternSum(n)
	start := time.Now()
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(n))
	bw := bufio.NewWriterSize(c, 256<<10)
	_, _ = bw.Write(hdr[:])
	if err := writePattern(bw, n); err != nil || bw.Flush() != nil {
		t.Fatalf("upload: %v", err)
	}
	got := make([]byte, 32)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("upload checksum: %v", err)
	}
	up = mibps(n, time.Since(start))
	if !bytes.Equal(got, want) {
		t.Fatalf("the pod received data with sha256 %x, sent %x", got, want)
	}
	start = time.Now()
	h := sha256.New()
	if _, err := io.CopyN(h, c, n); err != nil {
		t.Fatalf("download: %v", err)
	}
	down = mibps(n, time.Since(start))
	if !bytes.Equal(h.Sum(nil), want) {
		t.Fatalf("downloaded data has sha256 %x, want %x", h.Sum(nil), want)
	}
	return up, down
}

func mibps(n int64, d time.Duration) float64 { return float64(n) / (1 << 20) / d.Seconds() }

// portForward starts kubectl port-forward and returns the local address and
// a func that stops it.
func portForward(t *testing.T, c streamClient, kubeconfig, ns, pod string, port int) (string, func()) {
	t.Helper()
	cmd := c.command(t, context.Background(), kubeconfig, "-n", ns, "port-forward", "pod/"+pod, fmt.Sprintf(":%d", port))
	addr, stop := clustertest.PortForward(t, cmd)
	return addr, func() { stop() }
}

func TestStreamPortForward100MiB(t *testing.T) {
	kc := userKubeconfig(t, "alice")
	admin := clustertest.Cluster(t).Kubeconfig
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "sink", []string{"sleep", "infinity"}, false)
	port := serveSink(t)
	for _, c := range portForwardClients {
		t.Run(c.transport, func(t *testing.T) {
			started := time.Now()
			addr, stop := portForward(t, c, kc, ns, "sink", port)
			up, down := transfer(t, addr, transferSize)
			stop()
			addr, stop = portForward(t, c, admin, ns, "sink", port)
			dUp, dDown := transfer(t, addr, transferSize)
			stop()
			t.Logf("port-forward %s, 100 MiB each way: limen up %.1f MiB/s down %.1f MiB/s; direct up %.1f down %.1f; ratio up %.2f down %.2f",
				c.transport, up, down, dUp, dDown, up/dUp, down/dDown)
			ev := waitSessionEnd(t, "alice", "sink", func(ev audit.Event) bool {
				return ev.Session.Login == "portforward" && ev.Time.After(started) && ev.Session.BytesIn > transferSize
			})
			s := ev.Session
			if !slices.Contains(s.Ports, strconv.Itoa(port)) || s.BytesOut < transferSize || s.RecordingSHA256 != "" || s.Namespace != ns {
				t.Fatalf("session.end %+v: want port %d, 100 MiB each way, no recording", s, port)
			}
		})
	}
	t.Logf("transports seen at the fake kubelet: %v", clustertest.Cluster(t).Kubelet.Seen())
}

func TestStreamExecThroughput(t *testing.T) {
	kc := userKubeconfig(t, "alice")
	admin := clustertest.Cluster(t).Kubeconfig
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "cat", []string{"sleep", "infinity"}, false)
	// Text, so the recording holds it as it is.
	file := filepath.Join(t.TempDir(), "big.txt")
	var b bytes.Buffer
	for i := 0; b.Len() < 64<<20; i++ {
		fmt.Fprintf(&b, "line %08d the quick brown fox jumps over the lazy dog 0123456789\n", i)
	}
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(b.Bytes())
	size := int64(b.Len())
	for _, c := range execClients {
		t.Run(c.transport, func(t *testing.T) {
			rate := func(kubeconfig string) float64 {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				defer cancel()
				cmd := c.command(t, ctx, kubeconfig, "-n", ns, "exec", "cat", "--", "cat", file)
				h := sha256.New()
				cmd.Stdout = h
				start := time.Now()
				if err := cmd.Run(); err != nil {
					t.Fatalf("exec cat: %v", err)
				}
				if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
					t.Fatalf("exec cat output sha256 %x, want %x", got, want)
				}
				return mibps(size, time.Since(start))
			}
			limen, direct := rate(kc), rate(admin)
			t.Logf("exec cat %d MiB over %s (recorded): limen %.1f MiB/s, direct %.1f MiB/s, ratio %.2f", size>>20, c.transport, limen, direct, limen/direct)
		})
	}
}
