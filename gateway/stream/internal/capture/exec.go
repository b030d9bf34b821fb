package capture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	serverrc "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"
	utilexec "k8s.io/utils/exec"
)

// Transport is how the exec client reaches the server.
type Transport int

const (
	// SPDY is client-go's SPDY executor against the kubelet handler (v4.channel.k8s.io).
	SPDY Transport = iota + 1
	// WebSocketV4 is client-go's WebSocket executor against the kubelet handler.
	WebSocketV4
	// WebSocketV5 is client-go's WebSocket executor against a v5 channel server
	// (the API server's protocol; the kubelet handler stops at v4).
	WebSocketV5
)

// What the fake command does, for tests to assert on.
const (
	// StdinText is sent by the client; it must never appear in a recording.
	StdinText = "secret-stdin-text\n"
	// ExitCode is the non-tty command's exit code (the tty command exits 0).
	ExitCode = 3
	// ResizeCols and ResizeRows are the tty client's terminal size.
	ResizeCols, ResizeRows = 100, 40
)

// fakeCommand reads the stdin it expects, then writes to stdout and stderr,
// splitting a UTF-8 "é" across two writes.
func fakeCommand(in io.Reader, out, errw io.Writer, tty bool, resize <-chan serverrc.TerminalSize) error {
	if tty {
		select {
		case sz := <-resize:
			fmt.Fprintf(out, "size %dx%d\r\n", sz.Width, sz.Height)
		case <-time.After(5 * time.Second):
			return errors.New("no resize")
		}
	}
	buf := make([]byte, len(StdinText))
	if _, err := io.ReadFull(in, buf); err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	io.WriteString(out, "hello from stdout\n")
	time.Sleep(10 * time.Millisecond)
	io.WriteString(out, "caf\xc3")
	time.Sleep(10 * time.Millisecond)
	io.WriteString(out, "\xa9\n")
	if tty {
		return nil
	}
	io.WriteString(errw, "warning on stderr\n")
	time.Sleep(10 * time.Millisecond)
	return utilexec.CodeExitError{Err: errors.New("exit status 3"), Code: ExitCode}
}

type fakeExecutor struct{}

func (fakeExecutor) ExecInContainer(_ context.Context, _, _, _ string, _ []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan serverrc.TerminalSize, _ time.Duration) error {
	return fakeCommand(in, out, errw, tty, resize)
}

func kubeletExec(w http.ResponseWriter, r *http.Request) {
	opts, err := serverrc.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	serverrc.ServeExec(w, r, fakeExecutor{}, "pod", "uid", "ctr", []string{"sh"}, opts,
		10*time.Second, 10*time.Second, serverrc.SupportedStreamingProtocols)
}

// sizeQueue sends one terminal size, then waits until the session ends.
type sizeQueue struct {
	sent bool
	done <-chan struct{}
}

func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	if !q.sent {
		q.sent = true
		return &remotecommand.TerminalSize{Width: ResizeCols, Height: ResizeRows}
	}
	<-q.done
	return nil
}

// Exec records one exec session over tr, with a tty or without.
func Exec(ctx context.Context, tr Transport, tty bool) (Session, error) {
	handler := http.HandlerFunc(kubeletExec)
	if tr == WebSocketV5 {
		handler = v5Exec
	}
	srv, rec := serve(handler)
	defer srv.Close()
	query := "?input=1&output=1&error=1&tty=0"
	if tty {
		query = "?input=1&output=1&error=0&tty=1"
	}
	url := srv.URL + "/exec" + query
	cfg := &rest.Config{Host: srv.URL}
	var exec remotecommand.Executor
	var err error
	switch tr {
	case SPDY:
		var u *neturl.URL
		if u, err = neturl.Parse(url); err == nil {
			exec, err = remotecommand.NewSPDYExecutor(cfg, "POST", u)
		}
	case WebSocketV4:
		exec, err = remotecommand.NewWebSocketExecutorForProtocols(cfg, "GET", url, "v4.channel.k8s.io")
	case WebSocketV5:
		exec, err = remotecommand.NewWebSocketExecutorForProtocols(cfg, "GET", url, "v5.channel.k8s.io")
	}
	if err != nil {
		return Session{}, err
	}
	done := make(chan struct{})
	defer close(done)
	var stdout, stderr strings.Builder
	opts := remotecommand.StreamOptions{Stdin: strings.NewReader(StdinText), Stdout: &stdout, Tty: tty}
	if tty {
		opts.TerminalSizeQueue = &sizeQueue{done: done}
	} else {
		opts.Stderr = &stderr
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err = exec.StreamWithContext(ctx, opts)
	var exitErr utilexec.ExitError
	if err != nil && !(errors.As(err, &exitErr) && exitErr.ExitStatus() == ExitCode) {
		return Session{}, fmt.Errorf("exec: %w", err)
	}
	if err := rec.finish(srv); err != nil {
		return Session{}, err
	}
	return rec.upgraded()
}

// v5Exec serves exec over v5.channel.k8s.io the way the API server does.
func v5Exec(w http.ResponseWriter, r *http.Request) {
	tty := r.FormValue("tty") == "1"
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		"v5.channel.k8s.io": {Binary: true, Channels: []wsstream.ChannelType{
			wsstream.ReadChannel, wsstream.WriteChannel, wsstream.WriteChannel,
			wsstream.WriteChannel, wsstream.ReadChannel}},
	})
	_, streams, err := conn.Open(w, r)
	if err != nil {
		return
	}
	defer conn.Close()
	resize := make(chan serverrc.TerminalSize, 1)
	go func() {
		dec := json.NewDecoder(streams[4])
		for {
			var sz serverrc.TerminalSize
			if dec.Decode(&sz) != nil {
				return
			}
			resize <- sz
		}
	}()
	err = fakeCommand(streams[0], streams[1], streams[2], tty, resize)
	status := map[string]any{"metadata": map[string]any{}, "status": "Success"}
	var exitErr utilexec.ExitError
	if errors.As(err, &exitErr) {
		status = map[string]any{"metadata": map[string]any{}, "status": "Failure",
			"message": "command terminated with non-zero exit code: " + err.Error(),
			"reason":  "NonZeroExitCode",
			"details": map[string]any{"causes": []map[string]any{
				{"reason": "ExitCode", "message": fmt.Sprint(exitErr.ExitStatus())}}}}
	}
	b, _ := json.Marshal(status)
	streams[3].Write(b)
	time.Sleep(20 * time.Millisecond)
}
