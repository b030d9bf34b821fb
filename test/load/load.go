// Package load is the client load the failure tests run Limen under, and
// the checks of what its clients saw: client-go GETs on connections of
// their own, a watch, an exec printing a numbered line every 100 ms and a
// port-forward echoing data. Each part records what its client saw; the
// checks (check.go) judge the records against the audit trail and the
// recordings. The three-proxy e2e, the crash scenarios (test/chaos) and
// the fault scenarios (test/faults) share it.
package load

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Defaults of Config.
const (
	DefaultRequestEvery = 50 * time.Millisecond
	DefaultChunk        = 16 << 10
	DefaultPrefix       = "load-"
)

// Config says what to load and through which kubeconfig.
type Config struct {
	// Namespace holds Pod and the configmaps the requests name.
	Namespace string
	// Clients carry the requests, in turn; the watch runs on Clients[0].
	Clients []*Client
	// Kubectl is the kubectl binary; Kubeconfig the user's kubeconfig
	// through the gateway, for the exec and the port-forward.
	Kubectl, Kubeconfig string
	// Pod is a running pod of Namespace with sh; EchoPort the port of it
	// that echoes every byte (ServeEcho behind the test kubelet).
	Pod      string
	EchoPort int
	// RequestEvery is the pace of the GETs (DefaultRequestEvery).
	RequestEvery time.Duration
	// Chunk is the size of one port-forward round (DefaultChunk).
	Chunk int
	// Prefix names the configmaps the GETs ask for, Prefix+seq; none
	// exists, so each success is the API server's NotFound naming it
	// (DefaultPrefix).
	Prefix string
	// NoExec, NoWatch and NoPortForward leave that part out.
	NoExec, NoWatch, NoPortForward bool
}

// Client is one client-go client with its own connection: a test can ask
// a load balancer where that connection goes (Local).
type Client struct {
	*kubernetes.Clientset
	local    atomic.Value // string: the local address of its last connection
	inFlight atomic.Int32
}

// Local is the local address of the client's last connection.
func (c *Client) Local() string { s, _ := c.local.Load().(string); return s }

// InFlight is how many of the load's requests the client has under way.
func (c *Client) InFlight() int { return int(c.inFlight.Load()) }

// NewClients returns n clients of kubeconfig, each with its own connection
// (a dialer of its own keeps client-go from sharing one transport) and no
// client-side rate limit.
func NewClients(kubeconfig string, n int) ([]*Client, error) {
	var out []*Client
	for range n {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
		c := &Client{}
		cfg.QPS, cfg.Burst = -1, 0
		d := &net.Dialer{Timeout: 5 * time.Second}
		cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, addr)
			if err == nil {
				c.local.Store(conn.LocalAddr().String())
			}
			return conn, err
		}
		if c.Clientset, err = kubernetes.NewForConfig(cfg); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// Request is one client-go GET as its client saw it.
type Request struct {
	Seq        int
	Client     int // its index in Config.Clients
	Start, End time.Time
	// OK: the API server's own answer reached the client whole (a NotFound
	// Status naming this request's configmap).
	OK     bool
	Status int // the HTTP status of a refusal, 0 for a transport error
	Err    string
}

// StreamEnd is the end of one exec, watch or port-forward.
type StreamEnd struct {
	At  time.Time
	Err string // what the client said (kubectl's exit status and stderr)
	// ExitCode is kubectl's exit code (exec and port-forward), -1 when it
	// was killed.
	ExitCode int
	// Clean: the stream ended as if it were over (exec exit 0, a watch
	// closed with no error): never acceptable, since none of them ends by
	// itself.
	Clean bool
}

// Exec is one kubectl exec of the load: it printed its Marker, then
// line-1, line-2, …; Last is the last line number its client received.
type Exec struct {
	Marker string
	// Marked: the client received the marker line.
	Marked     bool
	Start      time.Time
	FirstLine  time.Time // zero until line-1 arrived
	Last       int
	End        *StreamEnd // nil while it runs, or when the load stopped it
	StoppedRun bool       // the load's Stop ended it
}

// Snapshot is a copy of everything the load's clients saw so far.
type Snapshot struct {
	Requests   []Request
	WatchEnds  []StreamEnd
	WatchBack  []time.Duration // from a watch's end to its replacement's start
	WatchUp    bool
	WatchSeen  int // events received
	WatchStart []time.Time
	Execs      []Exec
	ExecEnds   []StreamEnd
	ExecGaps   []string // missing or reordered lines: bytes lost
	ExecLines  int
	PFEnds     []StreamEnd
	PFStarts   []time.Time // each port-forward's first round
	PFRounds   int
	PFMismatch []string // a round that came back different without an error
}

// Run is a load under way.
type Run struct {
	cfg    Config
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu sync.Mutex
	s  Snapshot
}

// Start starts the load; it runs until Stop or ctx ends.
func Start(ctx context.Context, cfg Config) *Run {
	if cfg.RequestEvery <= 0 {
		cfg.RequestEvery = DefaultRequestEvery
	}
	if cfg.Chunk <= 0 {
		cfg.Chunk = DefaultChunk
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	r := &Run{cfg: cfg}
	r.ctx, r.cancel = context.WithCancel(ctx)
	if len(cfg.Clients) > 0 {
		r.wg.Go(r.requests)
		if !cfg.NoWatch {
			r.wg.Go(r.watch)
		}
	}
	if !cfg.NoExec {
		r.wg.Go(r.exec)
	}
	if !cfg.NoPortForward {
		r.wg.Go(r.portForward)
	}
	return r
}

// Stop ends the load and waits for its parts.
func (r *Run) Stop() {
	r.cancel()
	r.wg.Wait()
}

// Config is the load's configuration, defaults filled in.
func (r *Run) Config() Config { return r.cfg }

// Clients are the load's clients.
func (r *Run) Clients() []*Client { return r.cfg.Clients }

// Snapshot returns a copy of what the clients saw so far.
func (r *Run) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.s
	s.Requests = append([]Request(nil), s.Requests...)
	s.WatchEnds = append([]StreamEnd(nil), s.WatchEnds...)
	s.WatchBack = append([]time.Duration(nil), s.WatchBack...)
	s.WatchStart = append([]time.Time(nil), s.WatchStart...)
	s.Execs = append([]Exec(nil), s.Execs...)
	s.ExecEnds = append([]StreamEnd(nil), s.ExecEnds...)
	s.ExecGaps = append([]string(nil), s.ExecGaps...)
	s.PFEnds = append([]StreamEnd(nil), s.PFEnds...)
	s.PFStarts = append([]time.Time(nil), s.PFStarts...)
	s.PFMismatch = append([]string(nil), s.PFMismatch...)
	return s
}

// Requests returns the requests started in [from, to).
func (r *Run) Requests(from, to time.Time) []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Request
	for _, q := range r.s.Requests {
		if !q.Start.Before(from) && q.Start.Before(to) {
			out = append(out, q)
		}
	}
	return out
}

// WatchUp reports whether the load's watch is open.
func (r *Run) WatchUp() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.s.WatchUp
}

// marker is a line no two execs share, printed first, by which the checks
// find an exec's recording.
func marker() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "limen-load-" + hex.EncodeToString(b)
}
