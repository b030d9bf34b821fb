package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Kubectl runs the real kubectl with one kubeconfig; Env (KEY=VALUE) picks
// the transport, for example KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false for
// SPDY exec.
type Kubectl struct {
	Path       string
	Kubeconfig string
	Env        []string
}

func (k Kubectl) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, k.Path, append([]string{"--kubeconfig", k.Kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), k.Env...)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// ExecThroughput prints size bytes in the pod through kubectl exec and
// returns the rate of its output in MiB/s, timed from the first byte to the
// last so kubectl's start and the exec handshake are left out. The output is
// text lines, as a terminal's is, or with binary random bytes, which a
// recording cannot store as plain text.
func ExecThroughput(ctx context.Context, k Kubectl, namespace, pod string, size int64, binary bool) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	n := strconv.FormatInt(size, 10)
	script := "yes 'limen-bench exec output: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJ' | head -c " + n
	if binary {
		script = "head -c " + n + " /dev/urandom"
	}
	cmd := k.command(ctx, "-n", namespace, "exec", pod, "--", "sh", "-c", script)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	rate, readErr := timedRead(out, size)
	if err := cmd.Wait(); err != nil {
		return 0, fmt.Errorf("kubectl exec: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return rate, readErr
}

// ExecInputThroughput sends size bytes to a command's stdin through
// kubectl exec -i and returns MiB/s, timed from the first byte written
// after the command said it is ready to the command's word that it read
// them all.
func ExecInputThroughput(ctx context.Context, k Kubectl, namespace, pod string, size int64) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	script := "echo ready; head -c " + strconv.FormatInt(size, 10) + " >/dev/null && echo done"
	cmd := k.command(ctx, "-n", namespace, "exec", "-i", pod, "--", "sh", "-c", script)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return 0, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	rate, sendErr := timedSend(out, in, size)
	_ = in.Close()
	if err := cmd.Wait(); err != nil {
		return 0, fmt.Errorf("kubectl exec -i: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return rate, sendErr
}

// timedSend waits for the line "ready" on out, then writes size bytes to in
// and waits for the line "done": MiB/s over that span.
func timedSend(out io.Reader, in io.Writer, size int64) (float64, error) {
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "ready" {
		return 0, fmt.Errorf("the command did not say it was ready: %q %v", lines.Text(), lines.Err())
	}
	start := time.Now()
	sent := make(chan error, 1)
	go func() { sent <- writeZeros(in, size) }()
	if !lines.Scan() || lines.Text() != "done" {
		return 0, fmt.Errorf("the command did not confirm it read %d bytes: %q %v (send: %v)", size, lines.Text(), lines.Err(), <-sent)
	}
	elapsed := time.Since(start)
	if err := <-sent; err != nil {
		return 0, err
	}
	return float64(size) / (1 << 20) / elapsed.Seconds(), nil
}

// writeZeros writes size zero bytes to w in 1 MiB writes.
func writeZeros(w io.Writer, size int64) error {
	buf := make([]byte, 1<<20)
	for left := size; left > 0; {
		n, err := w.Write(buf[:min(int64(len(buf)), left)])
		left -= int64(n)
		if err != nil {
			return fmt.Errorf("wrote %d of %d bytes: %w", size-left, size, err)
		}
	}
	return nil
}

// timedRead reads want bytes from r and returns MiB/s from the end of the
// first read to the end of the last, over the bytes after the first read.
func timedRead(r io.Reader, want int64) (float64, error) {
	buf := make([]byte, 1<<20)
	var got, first int64
	var start time.Time
	for got < want {
		n, err := r.Read(buf[:min(int64(len(buf)), want-got)])
		if got == 0 && n > 0 {
			start, first = time.Now(), int64(n)
		}
		got += int64(n)
		if err != nil {
			if errors.Is(err, io.EOF) && got == want {
				break
			}
			return 0, fmt.Errorf("read %d of %d bytes: %w", got, want, err)
		}
	}
	elapsed := time.Since(start)
	if got-first <= 0 || elapsed <= 0 {
		return 0, fmt.Errorf("read %d bytes in one read: too few to time", got)
	}
	return float64(got-first) / (1 << 20) / elapsed.Seconds(), nil
}

var forwarding = regexp.MustCompile(`^Forwarding from 127\.0\.0\.1:(\d+) ->`)

// PortForwardThroughput starts kubectl port-forward to port of the pod and
// moves size bytes through it, returning MiB/s. Down, it reads them from a
// server there that writes zeros (ServeZero), from the first byte to the
// last; up, it writes them to a server that reads them (ServeSink), from the
// first byte written to the server's word that it has them all.
func PortForwardThroughput(ctx context.Context, k Kubectl, namespace, pod string, port int, size int64, up bool) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := k.command(ctx, "-n", namespace, "port-forward", "pod/"+pod, ":"+strconv.Itoa(port))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() {
		cancel()
		_ = cmd.Wait()
	}()
	local := ""
	sc := bufio.NewScanner(out)
	for local == "" && sc.Scan() {
		if m := forwarding.FindStringSubmatch(sc.Text()); m != nil {
			local = "127.0.0.1:" + m[1]
		}
	}
	if local == "" {
		return 0, fmt.Errorf("kubectl port-forward printed no local port: %s", strings.TrimSpace(stderr.String()))
	}
	go func() { _, _ = io.Copy(io.Discard, out) }() // keep kubectl's stdout drained
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", local)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if !up {
		return timedRead(conn, size)
	}
	return timedUpload(conn, size)
}

// timedUpload sends ServeSink the size, then size bytes, and waits for its
// one-byte answer that it read them all: MiB/s from the first byte written
// to the answer.
func timedUpload(conn net.Conn, size int64) (float64, error) {
	start := time.Now()
	sent := make(chan error, 1)
	go func() {
		var head [8]byte
		binary.BigEndian.PutUint64(head[:], uint64(size))
		if _, err := conn.Write(head[:]); err != nil {
			sent <- err
			return
		}
		sent <- writeZeros(conn, size)
	}()
	var ack [1]byte
	if _, err := io.ReadFull(conn, ack[:]); err != nil {
		return 0, fmt.Errorf("the sink did not confirm %d bytes: %w (send: %v)", size, err, <-sent)
	}
	elapsed := time.Since(start)
	if err := <-sent; err != nil {
		return 0, err
	}
	return float64(size) / (1 << 20) / elapsed.Seconds(), nil
}

// ServeSink accepts connections on addr until ctx ends; on each it reads an
// 8-byte big-endian count, then that many bytes, and answers one byte. It is
// the pod behind the port-forward upload figures.
func ServeSink(ctx context.Context, addr string) error {
	return serve(ctx, addr, func(c net.Conn) {
		var head [8]byte
		if _, err := io.ReadFull(c, head[:]); err != nil {
			return
		}
		want := int64(binary.BigEndian.Uint64(head[:]))
		if n, err := io.CopyN(io.Discard, c, want); err != nil || n != want {
			return
		}
		_, _ = c.Write([]byte{1})
	})
}

// ServeZero accepts connections on addr and writes zeros to each until the
// peer goes away, until ctx ends. It is the pod behind the port-forward
// figures.
func ServeZero(ctx context.Context, addr string) error {
	zeros := make([]byte, 256<<10)
	return serve(ctx, addr, func(c net.Conn) {
		for {
			if _, err := c.Write(zeros); err != nil {
				return
			}
		}
	})
}

// serve accepts connections on addr until ctx ends and runs handle on each
// in a goroutine of its own; ctx's end closes them.
func serve(ctx context.Context, addr string, handle func(net.Conn)) error {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go func() {
			defer c.Close()
			unwatch := context.AfterFunc(ctx, func() { c.Close() })
			defer unwatch()
			handle(c)
		}()
	}
}

// Median returns the median of rates (the mean of the two middle values for
// an even count), or 0 for none.
func Median(rates []float64) float64 {
	if len(rates) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(rates))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// CopyThroughput runs kubectl cp once, moving the file src (size bytes)
// into the pod (up) or out of it into a new directory under dir, and
// returns MiB/s over the whole kubectl run: cp shows no first byte to time
// from, so kubectl's start counts, for direct and Limen alike. The pod's
// processes share this host's file system (test/cluster), so both paths
// are local; the copy must have src's size and bytes.
func CopyThroughput(ctx context.Context, k Kubectl, namespace, pod, src, dir string, size int64, up bool) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	run, err := os.MkdirTemp(dir, "cp-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(run)
	dst := filepath.Join(run, "copied")
	from, to := pod+":"+src, dst
	if up {
		from, to = src, pod+":"+dst
	}
	cmd := k.command(ctx, "-n", namespace, "cp", from, to)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("kubectl cp: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	elapsed := time.Since(start)
	if err := sameFile(src, dst, size); err != nil {
		return 0, fmt.Errorf("kubectl cp: %w", err)
	}
	return float64(size) / (1 << 20) / elapsed.Seconds(), nil
}

// sameFile reports how copy differs from src (size bytes), nil if not.
func sameFile(src, copy string, size int64) error {
	sum := func(path string) ([32]byte, int64, error) {
		f, err := os.Open(path)
		if err != nil {
			return [32]byte{}, 0, err
		}
		defer f.Close()
		h := sha256.New()
		n, err := io.Copy(h, f)
		return [32]byte(h.Sum(nil)), n, err
	}
	want, _, err := sum(src)
	if err != nil {
		return err
	}
	got, n, err := sum(copy)
	if err != nil {
		return fmt.Errorf("the copy: %w", err)
	}
	if n != size || got != want {
		return fmt.Errorf("the copy holds %d bytes (SHA-256 %x), want %d (%x)", n, got[:8], size, want[:8])
	}
	return nil
}

// WriteRandomFile writes size random bytes to path, for CopyThroughput.
func WriteRandomFile(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, rand.Reader, size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
