package kubelet

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/creack/pty"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"
	utilexec "k8s.io/utils/exec"
)

const (
	idleTimeout           = 4 * time.Hour
	streamCreationTimeout = 30 * time.Second
)

func (k *Kubelet) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	for _, pattern := range []string{"/exec/{ns}/{pod}/{container}", "/exec/{ns}/{pod}/{uid}/{container}"} {
		mux.HandleFunc(pattern, k.serveExec)
	}
	for _, pattern := range []string{"/attach/{ns}/{pod}/{container}", "/attach/{ns}/{pod}/{uid}/{container}"} {
		mux.HandleFunc(pattern, k.serveAttach)
	}
	for _, pattern := range []string{"/portForward/{ns}/{pod}", "/portForward/{ns}/{pod}/{uid}"} {
		mux.HandleFunc(pattern, k.servePortForward)
	}
	mux.HandleFunc("/containerLogs/{ns}/{pod}/{container}", k.serveLogs)
	return mux
}

// transport names the protocol the API server used toward the kubelet.
func transport(r *http.Request) string {
	if wsstream.IsWebSocketRequest(r) {
		return "websocket"
	}
	return "spdy"
}

func (k *Kubelet) target(w http.ResponseWriter, r *http.Request) (*pod, *container, bool) {
	p, ok := k.lookup(r.PathValue("ns"), r.PathValue("pod"))
	if !ok {
		http.Error(w, "pod not found on this node", http.StatusNotFound)
		return nil, nil, false
	}
	c, err := p.container(r.PathValue("container"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return nil, nil, false
	}
	return p, c, true
}

func (k *Kubelet) serveExec(w http.ResponseWriter, r *http.Request) {
	p, c, ok := k.target(w, r)
	if !ok {
		return
	}
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	k.recordTransport("exec:" + transport(r))
	remotecommand.ServeExec(w, r, execFunc(func(ctx context.Context, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
		ctx, done := p.within(ctx) // the process dies with its pod
		defer done()
		return runExec(ctx, p.dir, c.env, cmd, in, out, errw, tty, resize)
	}), p.name, string(p.uid), c.spec.Name, r.URL.Query()["command"], opts,
		idleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (k *Kubelet) serveAttach(w http.ResponseWriter, r *http.Request) {
	p, c, ok := k.target(w, r)
	if !ok {
		return
	}
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	k.recordTransport("attach:" + transport(r))
	remotecommand.ServeAttach(w, r, attachFunc(c.attach), p.name, string(p.uid), c.spec.Name, opts,
		idleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (k *Kubelet) servePortForward(w http.ResponseWriter, r *http.Request) {
	p, ok := k.lookup(r.PathValue("ns"), r.PathValue("pod"))
	if !ok {
		http.Error(w, "pod not found on this node", http.StatusNotFound)
		return
	}
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	k.recordTransport("portforward:" + transport(r))
	forward := func(ctx context.Context, port int32, stream io.ReadWriteCloser) error {
		ctx, done := p.within(ctx) // the connection breaks with its pod
		defer done()
		return dialLocal(ctx, port, stream)
	}
	portforward.ServePortForward(w, r, forwardFunc(forward), p.name, string(p.uid), opts,
		idleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}

// execFunc adapts a function to remotecommand.Executor.
type execFunc func(ctx context.Context, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error

func (f execFunc) ExecInContainer(ctx context.Context, _, _, _ string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	return f(ctx, cmd, in, out, errw, tty, resize)
}

// attachFunc adapts a function to remotecommand.Attacher.
type attachFunc func(ctx context.Context, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error

func (f attachFunc) AttachContainer(ctx context.Context, _, _, _ string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	return f(ctx, in, out, errw, tty, resize)
}

// forwardFunc adapts a function to portforward.PortForwarder.
type forwardFunc func(ctx context.Context, port int32, stream io.ReadWriteCloser) error

func (f forwardFunc) PortForward(ctx context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	return f(ctx, port, stream)
}

// dialLocal forwards to the port on loopback: every pod shares the host's
// network here.
func dialLocal(ctx context.Context, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
	if err != nil {
		return fmt.Errorf("dial port %d: %w", port, err)
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(conn, stream); conn.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { _, _ = io.Copy(stream, conn); done <- struct{}{} }()
	select {
	case <-done:
		<-done
	case <-ctx.Done():
	}
	return nil
}

// runExec runs cmd as a local process in the pod's directory.
func runExec(ctx context.Context, dir string, env, argv []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	if len(argv) == 0 {
		return fmt.Errorf("no command given")
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, env
	var err error
	if tty {
		err = runTTY(cmd, in, out, resize)
	} else {
		go drainResize(resize)
		if in != nil {
			cmd.Stdin = in
		}
		if out != nil {
			cmd.Stdout = out
		}
		if errw != nil {
			cmd.Stderr = errw
		}
		// A client that never closes stdin must not keep the exec open after
		// the process exited.
		cmd.WaitDelay = time.Second
		err = cmd.Run()
		if err == exec.ErrWaitDelay {
			err = nil
		}
	}
	if ee, ok := err.(*exec.ExitError); ok {
		code := ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal()) // as a container runtime reports a killed process: 137
		}
		return utilexec.CodeExitError{Err: ee, Code: code}
	}
	return err
}

func runTTY(cmd *exec.Cmd, in io.Reader, out io.Writer, resize <-chan remotecommand.TerminalSize) error {
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 80, Rows: 24})
	if err != nil {
		return err
	}
	defer ptmx.Close()
	go func() {
		for sz := range resize {
			_ = pty.Setsize(ptmx, &pty.Winsize{Cols: sz.Width, Rows: sz.Height})
		}
	}()
	if in != nil {
		go func() { _, _ = io.Copy(ptmx, in) }()
	}
	if out == nil {
		out = nopWriteCloser{io.Discard}
	}
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(out, ptmx); close(copied) }()
	err = cmd.Wait()
	select { // read what the process wrote before it exited
	case <-copied:
	case <-time.After(2 * time.Second):
	}
	return err
}

func drainResize(resize <-chan remotecommand.TerminalSize) {
	for range resize {
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// attach connects a client to the running process: its output from now on,
// and its stdin and terminal size when the container has them.
func (c *container) attach(ctx context.Context, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	c.mu.Lock()
	if !c.running {
		c.mu.Unlock()
		return errNotRunning
	}
	a := &attachment{}
	if out != nil {
		a.out = out
	}
	if errw != nil {
		a.err = errw
	}
	c.attached[a] = struct{}{}
	ptmx, stdin, exited := c.ptmx, c.stdin, c.exited
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.attached, a)
		c.mu.Unlock()
	}()
	go func() {
		for sz := range resize {
			if tty && ptmx != nil {
				_ = pty.Setsize(ptmx, &pty.Winsize{Cols: sz.Width, Rows: sz.Height})
			}
		}
	}()
	inDone := make(chan struct{})
	if in != nil && stdin != nil {
		go func() { _, _ = io.Copy(stdin, in); close(inDone) }()
	}
	select {
	case <-ctx.Done():
	case <-exited:
	case <-inDone:
	}
	return nil
}

// serveLogs streams a container's log, following it while the container runs.
func (k *Kubelet) serveLogs(w http.ResponseWriter, r *http.Request) {
	_, c, ok := k.target(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	f, err := os.Open(c.logPath)
	if err != nil {
		http.Error(w, "no log yet: "+err.Error(), http.StatusNotFound)
		return
	}
	defer f.Close()
	if n, err := strconv.Atoi(q.Get("tailLines")); err == nil && n >= 0 {
		if err := seekTail(f, n); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	var dst io.Writer = w
	if n, err := strconv.ParseInt(q.Get("limitBytes"), 10, 64); err == nil && n > 0 {
		dst = &limitWriter{w: w, n: n}
	}
	follow := q.Get("follow") == "true" || q.Get("follow") == "1"
	copyLog(r.Context(), f, dst, w.(http.Flusher), c, follow)
}

func copyLog(ctx context.Context, f *os.File, w io.Writer, fl http.Flusher, c *container, follow bool) {
	br := bufio.NewReader(f)
	buf := make([]byte, 32*1024)
	for {
		n, err := br.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			fl.Flush()
			continue
		}
		if err != io.EOF || !follow {
			return
		}
		c.mu.Lock()
		exited := c.exited
		running := c.running
		c.mu.Unlock()
		if !running {
			select {
			case <-exited: // drained a finished container's log
				return
			default:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// seekTail positions f at the start of its last n lines.
func seekTail(f *os.File, n int) error {
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	off := len(b)
	for i := 0; i < n && off > 0; i++ {
		off = bytes.LastIndexByte(b[:off], '\n')
		if off < 0 {
			off = 0
			break
		}
	}
	if n == 0 {
		off = len(b) + 1
	} else if off > 0 {
		off++
	}
	_, err = f.Seek(int64(min(off, len(b)+1)), io.SeekStart)
	return err
}

type limitWriter struct {
	w io.Writer
	n int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, io.ErrShortWrite
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.w.Write(p)
	l.n -= int64(n)
	return n, err
}
