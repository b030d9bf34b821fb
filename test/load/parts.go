package load

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// requests sends one GET every RequestEvery, each on the next client (each
// client its own connection), without waiting for the previous one.
// client-go's own retries are off: one request is one attempt, so what the
// audit trail holds can be matched to it.
func (r *Run) requests() {
	t := time.NewTicker(r.cfg.RequestEvery)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for seq := 0; ; seq++ {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
		wg.Go(func() { r.get(seq) })
	}
}

func (r *Run) get(seq int) {
	ci := seq % len(r.cfg.Clients)
	c := r.cfg.Clients[ci]
	name := r.cfg.Prefix + strconv.Itoa(seq)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	q := Request{Seq: seq, Client: ci, Start: time.Now()}
	c.inFlight.Add(1)
	err := c.CoreV1().RESTClient().Get().Namespace(r.cfg.Namespace).Resource("configmaps").Name(name).MaxRetries(0).Do(ctx).Error()
	c.inFlight.Add(-1)
	q.End = time.Now()
	var se *apierrors.StatusError
	switch {
	case err == nil:
		q.Err = "configmap " + name + " exists"
	case errors.As(err, &se):
		st := se.ErrStatus
		q.Status = int(st.Code)
		q.OK = st.Code == 404 && st.Details != nil && st.Details.Name == name
		if !q.OK {
			q.Err = err.Error()
		}
	default:
		q.Err = err.Error()
	}
	r.mu.Lock()
	r.s.Requests = append(r.s.Requests, q)
	r.mu.Unlock()
}

// watch keeps a watch of the namespace's configmaps open on client 0,
// opening a new one whenever one ends.
func (r *Run) watch() {
	var ended time.Time
	for r.ctx.Err() == nil {
		w, err := r.cfg.Clients[0].CoreV1().ConfigMaps(r.cfg.Namespace).Watch(r.ctx, metav1.ListOptions{})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		r.mu.Lock()
		if !ended.IsZero() {
			r.s.WatchBack = append(r.s.WatchBack, time.Since(ended))
		}
		r.s.WatchUp = true
		r.s.WatchStart = append(r.s.WatchStart, time.Now())
		r.mu.Unlock()
		end := StreamEnd{Clean: true}
	events:
		for {
			select {
			case <-r.ctx.Done():
				w.Stop()
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					break events
				}
				if ev.Type == watch.Error {
					end.Clean, end.Err = false, fmt.Sprint(apierrors.FromObject(ev.Object))
					break events
				}
				r.mu.Lock()
				r.s.WatchSeen++
				r.mu.Unlock()
			}
		}
		w.Stop()
		if r.ctx.Err() != nil {
			return
		}
		// client-go's watch decoder closes the channel on a decode or
		// transport error without telling which; a clean end is the API
		// server closing the watch, which it does only after minutes.
		ended = time.Now()
		end.At = ended
		r.mu.Lock()
		r.s.WatchUp = false
		r.s.WatchEnds = append(r.s.WatchEnds, end)
		r.mu.Unlock()
	}
}

// execScript prints its marker, then line-1, line-2, … every 100 ms.
const execScript = "echo %s; i=0; while :; do i=$((i+1)); echo line-$i; sleep 0.1; done"

// exec keeps a kubectl exec open that prints line-1, line-2, … every
// 100 ms, and checks that no line goes missing: a stream may end with an
// error, never lose what it delivers.
func (r *Run) exec() {
	for r.ctx.Err() == nil {
		m := marker()
		cmd := exec.Command(r.cfg.Kubectl, "--kubeconfig", r.cfg.Kubeconfig, "-n", r.cfg.Namespace, "exec", r.cfg.Pod, "--",
			"sh", "-c", fmt.Sprintf(execScript, m))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		r.mu.Lock()
		i := len(r.s.Execs)
		r.s.Execs = append(r.s.Execs, Exec{Marker: m, Start: time.Now()})
		r.mu.Unlock()
		stop := context.AfterFunc(r.ctx, func() { _ = cmd.Process.Kill() })
		sc := bufio.NewScanner(out)
		next := 1
		for sc.Scan() {
			if next == 1 && sc.Text() == m {
				r.mu.Lock()
				r.s.Execs[i].Marked = true
				r.mu.Unlock()
				continue
			}
			n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "line-"))
			r.mu.Lock()
			if err != nil || n != next {
				r.s.ExecGaps = append(r.s.ExecGaps, fmt.Sprintf("after line-%d came %q", next-1, sc.Text()))
			}
			if r.s.Execs[i].FirstLine.IsZero() {
				r.s.Execs[i].FirstLine = time.Now()
			}
			r.s.Execs[i].Last = n
			r.s.ExecLines++
			r.mu.Unlock()
			next = n + 1
		}
		err := cmd.Wait()
		stop()
		if r.ctx.Err() != nil {
			r.mu.Lock()
			r.s.Execs[i].StoppedRun = true
			r.mu.Unlock()
			return
		}
		end := StreamEnd{At: time.Now(), Clean: err == nil, ExitCode: exitCode(err),
			Err: strings.TrimSpace(fmt.Sprint(err, ": ", stderr.String()))}
		r.mu.Lock()
		r.s.Execs[i].End = &end
		r.s.ExecEnds = append(r.s.ExecEnds, end)
		r.mu.Unlock()
		time.Sleep(200 * time.Millisecond)
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// portForward keeps a kubectl port-forward to the echo port open and sends
// Chunk random bytes through it every 100 ms, each round checked byte for
// byte.
func (r *Run) portForward() {
	for r.ctx.Err() == nil {
		cmd := exec.Command(r.cfg.Kubectl, "--kubeconfig", r.cfg.Kubeconfig, "-n", r.cfg.Namespace, "port-forward",
			"pod/"+r.cfg.Pod, fmt.Sprintf(":%d", r.cfg.EchoPort))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		addr, err := StartPortForward(r.ctx, cmd)
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		err = r.echoRounds(addr)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if r.ctx.Err() != nil {
			return
		}
		msg := fmt.Sprint(err)
		if s := strings.TrimSpace(stderr.String()); s != "" {
			msg += "; kubectl: " + s
		}
		r.mu.Lock()
		r.s.PFEnds = append(r.s.PFEnds, StreamEnd{At: time.Now(), Err: msg})
		r.mu.Unlock()
		time.Sleep(200 * time.Millisecond)
	}
}

// echoRounds sends rounds through addr until one fails or the load stops.
func (r *Run) echoRounds(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	sent, got := make([]byte, r.cfg.Chunk), make([]byte, r.cfg.Chunk)
	for first := true; r.ctx.Err() == nil; first = false {
		for i := range sent {
			sent[i] = byte(rand.Uint32())
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(sent); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		if _, err := io.ReadFull(c, got); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		r.mu.Lock()
		if first {
			r.s.PFStarts = append(r.s.PFStarts, time.Now())
		}
		if !bytes.Equal(sent, got) {
			r.s.PFMismatch = append(r.s.PFMismatch, fmt.Sprintf("round %d came back different", r.s.PFRounds))
		}
		r.s.PFRounds++
		r.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// StartPortForward starts kubectl port-forward and returns its local
// address once it listens.
func StartPortForward(ctx context.Context, cmd *exec.Cmd) (string, error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "Forwarding from "); ok && strings.HasPrefix(a, "127.0.0.1:") {
				select {
				case found <- strings.Fields(a)[0]:
				default:
				}
			}
		}
		close(found)
	}()
	select {
	case a, ok := <-found:
		if ok {
			return a, nil
		}
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return "", fmt.Errorf("kubectl port-forward did not listen")
}

// ServeEcho serves ln until it closes: each connection gets every byte
// back. It is the pod's port for the port-forward.
func ServeEcho(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

// TickConfigMap updates a configmap named name in ns every 250 ms,
// directly at the API server, so that the watch has events to carry,
// until ctx ends.
func TickConfigMap(ctx context.Context, c kubernetes.Interface, ns, name string) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"n": "0"}}
	_, _ = c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cm.Data["n"] = strconv.Itoa(n)
		cm.ResourceVersion = ""
		_, _ = c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
	}
}
