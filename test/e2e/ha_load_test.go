package e2e

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
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// The load of the three-proxy test (ha_test.go), all through the load
// balancer: client-go requests every haRequestEvery, a watch, an exec
// printing a numbered line every 100 ms and a port-forward echoing
// haChunk bytes every 100 ms. Each part records what its client saw; the
// test judges the records.

const (
	haRequestEvery = 50 * time.Millisecond
	haChunk        = 16 << 10
)

// haClient is one client-go client with its own connection through the
// balancer: the test asks HAProxy which proxy that connection goes to.
type haClient struct {
	*kubernetes.Clientset
	local    atomic.Value // string: the local address of its last connection
	inFlight atomic.Int32
}

// haReq is one client-go request as its client saw it.
type haReq struct {
	seq        int
	start, end time.Time
	// ok: the API server's own answer reached the client whole (a NotFound
	// Status naming this request's configmap, ha-SEQ).
	ok     bool
	status int // the HTTP status of a refusal, 0 for a transport error
	err    string
}

// haStreamEnd is the end of one exec, watch or port-forward.
type haStreamEnd struct {
	at  time.Time
	err string
	// clean: the stream ended as if it were over (exec exit 0, a watch
	// closed with no error): never acceptable here, since none of them
	// ends by itself.
	clean bool
}

type haLoad struct {
	ns      string
	clients []*haClient
	kubectl string
	kc      string // alice's kubeconfig, through the balancer
	pod     string
	pfPort  int

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	reqs       []haReq
	watchEnds  []haStreamEnd
	watchBack  []time.Duration // from a watch's end to its replacement's start
	watchUp    bool
	watchSeen  int // events received
	execEnds   []haStreamEnd
	execGaps   []string // missing or reordered lines: bytes lost
	execLines  int
	pfEnds     []haStreamEnd
	pfRounds   int
	pfMismatch []string // a round that came back different without an error
}

func (l *haLoad) start() {
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Go(l.requests)
	l.wg.Go(l.watch)
	l.wg.Go(l.exec)
	l.wg.Go(l.portForward)
}

func (l *haLoad) stop() {
	l.cancel()
	l.wg.Wait()
}

// requests sends one GET every haRequestEvery, each on the next client
// (each client its own connection through the balancer), without waiting
// for the previous one. client-go's own retries are off: one request is
// one attempt, so what the audit trail holds can be matched to it.
func (l *haLoad) requests() {
	t := time.NewTicker(haRequestEvery)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for seq := 0; ; seq++ {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		wg.Go(func() { l.get(seq) })
	}
}

func (l *haLoad) get(seq int) {
	c := l.clients[seq%len(l.clients)]
	name := fmt.Sprintf("ha-%d", seq)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r := haReq{seq: seq, start: time.Now()}
	c.inFlight.Add(1)
	err := c.CoreV1().RESTClient().Get().Namespace(l.ns).Resource("configmaps").Name(name).MaxRetries(0).Do(ctx).Error()
	c.inFlight.Add(-1)
	r.end = time.Now()
	var se *apierrors.StatusError
	switch {
	case err == nil:
		r.err = "configmap " + name + " exists"
	case errors.As(err, &se):
		st := se.ErrStatus
		r.status = int(st.Code)
		r.ok = st.Code == 404 && st.Details != nil && st.Details.Name == name
		if !r.ok {
			r.err = err.Error()
		}
	default:
		r.err = err.Error()
	}
	l.mu.Lock()
	l.reqs = append(l.reqs, r)
	l.mu.Unlock()
}

// window returns the requests started in [from, to).
func (l *haLoad) window(from, to time.Time) []haReq {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []haReq
	for _, r := range l.reqs {
		if !r.start.Before(from) && r.start.Before(to) {
			out = append(out, r)
		}
	}
	return out
}

// watch keeps a watch of the namespace's configmaps open on client 0,
// opening a new one whenever one ends.
func (l *haLoad) watch() {
	var ended time.Time
	for l.ctx.Err() == nil {
		w, err := l.clients[0].CoreV1().ConfigMaps(l.ns).Watch(l.ctx, metav1.ListOptions{})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		l.mu.Lock()
		if !ended.IsZero() {
			l.watchBack = append(l.watchBack, time.Since(ended))
		}
		l.watchUp = true
		l.mu.Unlock()
		end := haStreamEnd{clean: true}
	events:
		for {
			select {
			case <-l.ctx.Done():
				w.Stop()
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					break events
				}
				if ev.Type == watch.Error {
					end.clean, end.err = false, fmt.Sprint(apierrors.FromObject(ev.Object))
					break events
				}
				l.mu.Lock()
				l.watchSeen++
				l.mu.Unlock()
			}
		}
		w.Stop()
		if l.ctx.Err() != nil {
			return
		}
		// client-go's watch decoder closes the channel on a decode or
		// transport error without telling which; a clean end is the API
		// server closing the watch, which it does only after minutes.
		ended = time.Now()
		end.at = ended
		l.mu.Lock()
		l.watchUp = false
		l.watchEnds = append(l.watchEnds, end)
		l.mu.Unlock()
	}
}

// exec keeps a kubectl exec open that prints line-1, line-2, … every
// 100 ms, and checks that no line goes missing: a stream may end with an
// error, never lose what it delivers.
func (l *haLoad) exec() {
	script := "i=0; while :; do i=$((i+1)); echo line-$i; sleep 0.1; done"
	for l.ctx.Err() == nil {
		cmd := exec.Command(l.kubectl, "--kubeconfig", l.kc, "-n", l.ns, "exec", l.pod, "--", "sh", "-c", script)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		stop := context.AfterFunc(l.ctx, func() { _ = cmd.Process.Kill() })
		sc := bufio.NewScanner(out)
		next := 1
		for sc.Scan() {
			n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "line-"))
			l.mu.Lock()
			if err != nil || n != next {
				l.execGaps = append(l.execGaps, fmt.Sprintf("after line-%d came %q", next-1, sc.Text()))
			}
			l.execLines++
			l.mu.Unlock()
			next = n + 1
		}
		err := cmd.Wait()
		stop()
		if l.ctx.Err() != nil {
			return
		}
		l.mu.Lock()
		l.execEnds = append(l.execEnds, haStreamEnd{at: time.Now(), clean: err == nil,
			err: strings.TrimSpace(fmt.Sprint(err, ": ", stderr.String()))})
		l.mu.Unlock()
		time.Sleep(200 * time.Millisecond)
	}
}

// portForward keeps a kubectl port-forward to the echo port open and
// sends haChunk random bytes through it every 100 ms, each round checked
// byte for byte.
func (l *haLoad) portForward() {
	for l.ctx.Err() == nil {
		cmd := exec.Command(l.kubectl, "--kubeconfig", l.kc, "-n", l.ns, "port-forward", "pod/"+l.pod, fmt.Sprintf(":%d", l.pfPort))
		addr, err := startPortForward(l.ctx, cmd)
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		err = l.echoRounds(addr)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if l.ctx.Err() != nil {
			return
		}
		l.mu.Lock()
		l.pfEnds = append(l.pfEnds, haStreamEnd{at: time.Now(), err: fmt.Sprint(err)})
		l.mu.Unlock()
		time.Sleep(200 * time.Millisecond)
	}
}

// echoRounds sends rounds through addr until one fails or the load stops.
func (l *haLoad) echoRounds(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	sent, got := make([]byte, haChunk), make([]byte, haChunk)
	for l.ctx.Err() == nil {
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
		l.mu.Lock()
		if !bytes.Equal(sent, got) {
			l.pfMismatch = append(l.pfMismatch, fmt.Sprintf("round %d came back different", l.pfRounds))
		}
		l.pfRounds++
		l.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// startPortForward starts kubectl port-forward and returns its local
// address once it listens.
func startPortForward(ctx context.Context, cmd *exec.Cmd) (string, error) {
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

// serveEcho is the pod's port: it echoes every byte back.
func serveEcho(ln net.Listener) {
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

// tickConfigMap updates a configmap in ns every 250 ms, directly at the
// API server, so that the watch has events to carry.
func tickConfigMap(ctx context.Context, c kubernetes.Interface, ns string) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ha-tick"}, Data: map[string]string{"n": "0"}}
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
