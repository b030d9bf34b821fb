package kubelet

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// defaultCommand runs when a container names no command: there is no image
// to take an entrypoint from.
var defaultCommand = []string{"sleep", "infinity"}

// container is one container of a pod: a local process, restarted as the
// pod's restart policy says, its output appended to a log file and copied to
// every attached client.
type container struct {
	pod      *pod
	spec     corev1.Container
	env      []string
	startErr error // the environment or volumes could not be made
	logPath  string

	mu        sync.Mutex
	cmd       *exec.Cmd
	ptmx      *os.File       // the pty master, when spec.TTY
	stdin     io.WriteCloser // the process's stdin, when spec.Stdin
	running   bool
	startedAt time.Time
	exit      *corev1.ContainerStateTerminated
	lastExit  *corev1.ContainerStateTerminated
	restarts  int32
	exited    chan struct{} // closed when the current run ends
	attached  map[*attachment]struct{}
	stopped   bool
}

type attachment struct{ out, err io.Writer }

func newContainer(p *pod, spec corev1.Container, env []string, startErr error) *container {
	return &container{
		pod: p, spec: spec, env: env, startErr: startErr,
		logPath:  filepath.Join(p.dir, spec.Name+".log"),
		exited:   make(chan struct{}),
		attached: map[*attachment]struct{}{},
	}
}

// argv is the command line to start: the image's entrypoint and the args
// for an image this node knows (SetImage) and no command, under its mounts;
// else the command and args, or the default command.
func (c *container) argv() ([]string, error) {
	if entry, ok := c.pod.k.image(c.spec.Image); ok {
		argv := append(append([]string{}, c.spec.Command...), c.spec.Args...)
		if len(c.spec.Command) == 0 {
			argv = append(append([]string{}, entry...), c.spec.Args...)
		}
		return c.mountScript(argv)
	}
	argv := append(append([]string{}, c.spec.Command...), c.spec.Args...)
	if len(c.spec.Command) == 0 {
		argv = append(append([]string{}, defaultCommand...), c.spec.Args...)
		if len(c.spec.Args) > 0 {
			argv = append([]string{}, c.spec.Args...)
		}
	}
	return argv, nil
}

// supervise runs the container, restarting it as the restart policy says,
// until the pod stops.
func (c *container) supervise(ctx context.Context) {
	backoff := time.Second
	for {
		code, err := c.runOnce()
		if err != nil {
			c.pod.k.Logger.Warn("start container", "pod", c.pod.name, "container", c.spec.Name, "err", err)
		}
		c.pod.changed()
		restart := c.pod.policy == corev1.RestartPolicyAlways ||
			(c.pod.policy == corev1.RestartPolicyOnFailure && code != 0)
		if !restart || c.pod.isStopping() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
		c.mu.Lock()
		c.restarts++
		c.lastExit, c.exit = c.exit, nil
		c.exited = make(chan struct{})
		c.mu.Unlock()
	}
}

// runOnce starts the process and waits for it, returning its exit code.
func (c *container) runOnce() (int32, error) {
	logf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return c.finish(128, "StartError", err)
	}
	defer logf.Close()
	if c.startErr != nil {
		return c.finish(128, "CreateContainerConfigError", c.startErr)
	}
	argv, err := c.argv()
	if err != nil {
		return c.finish(128, "CreateContainerError", err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = c.pod.dir, c.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: !c.spec.TTY}
	var pumps sync.WaitGroup
	if c.spec.TTY {
		ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 80, Rows: 24})
		if err != nil {
			return c.finish(128, "StartError", err)
		}
		defer ptmx.Close()
		c.mu.Lock()
		c.ptmx, c.stdin = ptmx, ptmx
		c.mu.Unlock()
		pumps.Go(func() { c.pump(ptmx, logf, false) })
	} else {
		stdout, _ := cmd.StdoutPipe()
		stderr, _ := cmd.StderrPipe()
		var stdin io.WriteCloser
		if c.spec.Stdin {
			stdin, _ = cmd.StdinPipe()
		}
		if err := cmd.Start(); err != nil {
			return c.finish(128, "StartError", err)
		}
		c.mu.Lock()
		c.stdin = stdin
		c.mu.Unlock()
		pumps.Go(func() { c.pump(stdout, logf, false) })
		pumps.Go(func() { c.pump(stderr, logf, true) })
	}
	c.mu.Lock()
	c.cmd, c.running, c.startedAt = cmd, true, time.Now()
	c.mu.Unlock()
	c.pod.changed()
	pumpsDone := make(chan struct{})
	go func() { pumps.Wait(); close(pumpsDone) }()
	err = cmd.Wait()
	select { // children of the process may hold the output open
	case <-pumpsDone:
	case <-time.After(2 * time.Second):
	}
	code := int32(cmd.ProcessState.ExitCode())
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int32(ws.Signal())
	}
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	_ = err
	return c.finish(code, reason, nil)
}

func (c *container) finish(code int32, reason string, err error) (int32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	c.running, c.ptmx, c.stdin = false, nil, nil
	c.exit = &corev1.ContainerStateTerminated{
		ExitCode: code, Reason: reason, Message: msg,
		StartedAt: metav1.NewTime(c.startedAt), FinishedAt: metav1.Now(),
		ContainerID: c.id(),
	}
	close(c.exited)
	return code, err
}

func (c *container) id() string { return "limen://" + string(c.pod.uid) + "/" + c.spec.Name }

// pump copies one output of the process to the log and every attachment.
func (c *container) pump(r io.Reader, log io.Writer, stderr bool) {
	buf := make([]byte, 32*1024)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, _ = log.Write(buf[:n])
			c.fanout(buf[:n], stderr)
		}
		if err != nil {
			return
		}
	}
}

func (c *container) fanout(p []byte, stderr bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for a := range c.attached {
		w := a.out
		if stderr {
			w = a.err
		}
		if w == nil {
			continue
		}
		if _, err := w.Write(p); err != nil {
			delete(c.attached, a)
		}
	}
}

func (c *container) status() corev1.ContainerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := corev1.ContainerStatus{
		Name: c.spec.Name, Image: c.spec.Image, ImageID: "limen-fake://" + c.spec.Image,
		ContainerID: c.id(), RestartCount: c.restarts, Ready: c.running, Started: &c.running,
	}
	switch {
	case c.running:
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.startedAt)}
	case c.exit != nil:
		cs.State.Terminated = c.exit
	default:
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
	}
	if c.lastExit != nil {
		cs.LastTerminationState.Terminated = c.lastExit
	}
	return cs
}

// stop sends SIGTERM to the process group and SIGKILL after grace.
func (c *container) stop(grace time.Duration) {
	c.mu.Lock()
	c.stopped = true
	cmd, running, exited := c.cmd, c.running, c.exited
	c.mu.Unlock()
	if !running || cmd == nil || cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
}

var errNotRunning = errors.New("container is not running")
