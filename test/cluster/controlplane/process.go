package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// process is one control-plane component running as a child process, its
// output in DIR/NAME.log.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	err     error
}

func startProcess(dir, name, bin string, args ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	// Appended to: a component restarted (Cluster.RestartAPIServer) keeps
	// the log of its first run.
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = dir
	// The child dies with the harness, however the harness ends (a test
	// timeout panics, Ctrl-C, kill -9).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	return p, nil
}

// stop asks the process to end and kills it after a grace period.
func (p *process) stop(grace time.Duration) {
	if p == nil {
		return
	}
	select {
	case <-p.exited:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}

// failure describes why the process is gone, with the end of its log.
func (p *process) failure() error {
	return fmt.Errorf("%s exited (%v); last log lines:\n%s", p.name, p.err, p.logTail(20))
}

func (p *process) logTail(n int) string {
	b, _ := os.ReadFile(p.logPath)
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// waitFor polls check until it succeeds, the process exits, or ctx ends.
func (p *process) waitFor(ctx context.Context, what string, check func(context.Context) error) error {
	var last error
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-p.exited:
			return p.failure()
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for %s: %w (last error: %v); log: %s", p.name, what, ctx.Err(), last, p.logPath)
		case <-t.C:
		}
	}
}

// freePorts reserves n distinct loopback ports. They are released before use,
// so another process could take one; the components then fail to start and
// the caller sees their log.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

var errNotReady = errors.New("not ready")
