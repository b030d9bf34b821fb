package capture

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strconv"
	"sync"
	"time"

	gwebsocket "github.com/gorilla/websocket"
	"k8s.io/apimachinery/pkg/util/httpstream"
	apispdy "k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	serverpf "k8s.io/cri-streaming/pkg/streaming/portforward"
)

// Port-forward scenario, for tests to assert on.
const (
	// EchoPort echoes what it receives.
	EchoPort = 8080
	// RefusedPort fails, so the server writes an error for it.
	RefusedPort = 9999
	// PayloadSize is the bytes sent (and echoed) on EchoPort.
	PayloadSize = 8 << 10
)

// Payload is the deterministic data sent to EchoPort.
func Payload() []byte {
	b := make([]byte, PayloadSize)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

type fakeForwarder struct{}

func (fakeForwarder) PortForward(_ context.Context, _, _ string, port int32, s io.ReadWriteCloser) error {
	if port != EchoPort {
		return errors.New("connection refused")
	}
	_, err := io.Copy(s, s)
	return err
}

func kubeletPortForward(w http.ResponseWriter, r *http.Request) {
	serverpf.ServePortForward(w, r, fakeForwarder{}, "pod", "uid", &serverpf.V4Options{},
		10*time.Second, 10*time.Second, serverpf.SupportedProtocols)
}

// PortForward records a port-forward session: EchoPort moves Payload both
// ways, then RefusedPort fails. With tunnel, client-go's SPDY-over-WebSocket
// dialer (SPDY/3.1+portforward.k8s.io) is used against a tunnelling server.
func PortForward(ctx context.Context, tunnel bool) (Session, error) {
	handler := http.HandlerFunc(kubeletPortForward)
	if tunnel {
		handler = tunnelPortForward
	}
	srv, rec := serve(handler)
	defer srv.Close()
	u, err := neturl.Parse(srv.URL + "/portforward")
	if err != nil {
		return Session{}, err
	}
	cfg := &rest.Config{Host: srv.URL}
	var dialer httpstream.Dialer
	if tunnel {
		dialer, err = portforward.NewSPDYOverWebsocketDialer(u, cfg)
	} else {
		var rt http.RoundTripper
		var up spdy.Upgrader
		if rt, up, err = spdy.RoundTripperFor(cfg); err == nil {
			dialer = spdy.NewDialer(up, &http.Client{Transport: rt}, "POST", u)
		}
	}
	if err != nil {
		return Session{}, err
	}
	conn, _, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		return Session{}, fmt.Errorf("dial: %w", err)
	}
	if err := forward(conn, EchoPort, 0, Payload()); err != nil {
		return Session{}, err
	}
	_ = forward(conn, RefusedPort, 1, []byte("nobody listens"))
	time.Sleep(100 * time.Millisecond)
	conn.Close()
	if err := rec.finish(srv); err != nil {
		return Session{}, err
	}
	return rec.upgraded()
}

// forward opens the error and data streams for one request the way client-go
// does, sends data, half-closes, and reads the reply.
func forward(conn httpstream.Connection, port, requestID int, data []byte) error {
	hdr := http.Header{}
	hdr.Set("streamType", "error")
	hdr.Set("port", strconv.Itoa(port))
	hdr.Set("requestID", strconv.Itoa(requestID))
	errStream, err := conn.CreateStream(hdr)
	if err != nil {
		return fmt.Errorf("error stream: %w", err)
	}
	errStream.Close()
	var wg sync.WaitGroup
	var errText []byte
	wg.Add(1)
	go func() {
		defer wg.Done()
		errText, _ = io.ReadAll(errStream)
	}()
	hdr.Set("streamType", "data")
	dataStream, err := conn.CreateStream(hdr)
	if err != nil {
		return fmt.Errorf("data stream: %w", err)
	}
	var echo []byte
	wg.Add(1)
	go func() {
		defer wg.Done()
		echo, _ = io.ReadAll(dataStream)
	}()
	_, werr := dataStream.Write(data)
	dataStream.Close()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		dataStream.Reset()
		errStream.Reset()
		return fmt.Errorf("port %d: no reply within 5s", port)
	}
	if port == EchoPort && (werr != nil || !bytes.Equal(echo, data)) {
		return fmt.Errorf("port %d: echo of %d bytes came back as %d (write: %v, error stream: %q)", port, len(data), len(echo), werr, errText)
	}
	return nil
}

// tunnelPortForward serves SPDY inside WebSocket like the API server's
// tunnelling handler, answering streams like the kubelet.
func tunnelPortForward(w http.ResponseWriter, r *http.Request) {
	up := gwebsocket.Upgrader{Subprotocols: []string{"SPDY/3.1+portforward.k8s.io"}}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	tconn := portforward.NewTunnelingConnection("server", ws)
	defer tconn.Close()
	var mu sync.Mutex
	errStreams := map[string]httpstream.Stream{}
	// Streams are registered in SYN_STREAM order (error before data), as the
	// kubelet pairs them by requestID.
	conn, err := apispdy.NewServerConnection(tconn, func(s httpstream.Stream, replySent <-chan struct{}) error {
		id := s.Headers().Get("requestID")
		mu.Lock()
		defer mu.Unlock()
		if s.Headers().Get("streamType") == "error" {
			errStreams[id] = s
			return nil
		}
		errStream := errStreams[id]
		go func() {
			<-replySent
			tunnelData(s, errStream)
		}()
		return nil
	})
	if err != nil {
		return
	}
	<-conn.CloseChan()
}

func tunnelData(data, errStream httpstream.Stream) {
	port, _ := strconv.Atoi(data.Headers().Get("port"))
	if err := (fakeForwarder{}).PortForward(context.Background(), "", "", int32(port), data); err != nil {
		if errStream != nil {
			fmt.Fprintf(errStream, "error forwarding port %d to pod pod, uid uid: %v", port, err)
			errStream.Reset()
		}
		data.Reset()
		return
	}
	data.Close()
	if errStream != nil {
		errStream.Close()
	}
}
