// Package controlplane runs a real Kubernetes control plane on loopback for
// Limen's tests and demo: etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler built from the Go module proxy at pinned versions, plus a fake
// kubelet that runs pods as local processes.
package controlplane

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/limenhq/limen/test/cluster/kubelet"
)

// NodeName is the name of the fake kubelet's Node.
const NodeName = "limen-node"

// MonitoringUser is the user of Cluster.MonitoringTokenFile.
const MonitoringUser = "limen-traced-worker"

// Options configure Start.
type Options struct {
	// Dir holds certificates, kubeconfigs, etcd data and component logs. It
	// must exist and be empty.
	Dir string
	// Progress receives one line per step; nil discards.
	Progress io.Writer
	// Logger receives the fake kubelet's logs; nil discards.
	Logger *slog.Logger
	// TracingEndpoint, if set, is an OTLP/gRPC collector (HOST:PORT) for
	// the API server's own spans (its --tracing-config-file). It samples
	// no trace of its own, so it records only requests that arrive inside
	// a sampled trace, such as Limen's with tracing on.
	TracingEndpoint string
}

// Cluster is a running control plane.
type Cluster struct {
	Dir        string
	Binaries   Binaries
	Kubeconfig string // admin (system:masters) kubeconfig
	Server     string // https://127.0.0.1:PORT
	CAFile     string // the CA that signed every certificate, the API server's included
	Admin      *rest.Config
	Client     kubernetes.Interface
	Kubelet    *kubelet.Kubelet // the fake node, for tests that ask what reached it
	// MonitoringTokenFile holds a bearer token of the user MonitoringUser,
	// in the group system:monitoring. The API server continues a caller's
	// trace only for that group and system:masters (it treats everyone
	// else as a public endpoint and starts a trace of its own), so a worker
	// whose API server spans must join Limen's trace authenticates so.
	MonitoringTokenFile string

	procs   []*process
	mu      sync.Mutex // procs, for KillAPIServer and RestartAPIServer
	apiArgs []string   // kube-apiserver's command line, for RestartAPIServer
	cancel  context.CancelFunc
	kubelet chan error
}

// Start builds (or reuses) the binaries and starts the whole control plane,
// returning when it is ready for use: the API server is ready, the node is
// registered, and the controllers the tests rely on have acted (see
// waitControllers).
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	bins, err := Build(ctx, progress)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: opts.Dir, Binaries: bins, CAFile: filepath.Join(opts.Dir, "ca.crt")}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	start := time.Now()
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	etcdClient, etcdPeer, apiPort, kubeletPort := ports[0], ports[1], ports[2], ports[3]
	c.Server = "https://" + hostPort(apiPort)

	p, err := c.writePKI()
	if err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	if err := c.startEtcd(ctx, etcdClient, etcdPeer); err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "cluster: etcd ready on %s\n", hostPort(etcdClient))
	if err := c.startAPIServer(ctx, p, apiPort, etcdClient, opts.TracingEndpoint); err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "cluster: kube-apiserver ready at %s (%s)\n", c.Server, time.Since(start).Round(time.Millisecond))
	if err := c.startControllers(p); err != nil {
		return nil, err
	}
	if err := c.startKubelet(ctx, p, kubeletPort, logger); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := waitControllers(wctx, c.Client); err != nil {
		return nil, fmt.Errorf("control plane not ready for use: %w; logs in %s", err, c.Dir)
	}
	fmt.Fprintf(progress, "cluster: control plane up in %s; export KUBECONFIG=%s\n",
		time.Since(start).Round(time.Millisecond), c.Kubeconfig)
	return c, nil
}

func (c *Cluster) writePKI() (*pki, error) {
	p, err := newPKI(c.Dir)
	if err != nil {
		return nil, err
	}
	loop := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")}
	steps := []struct {
		name, cn string
		orgs     []string
		dns      []string
		ips      []net.IP
	}{
		{"apiserver", "kube-apiserver", nil, []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}, loop},
		{"admin", "admin", []string{"system:masters"}, nil, nil},
		{"kube-controller-manager", "system:kube-controller-manager", nil, nil, nil},
		{"kube-scheduler", "system:kube-scheduler", nil, nil, nil},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil, nil},
		{"kubelet-client", "system:node:" + NodeName, []string{"system:nodes"}, nil, nil},
		{"kubelet-serving", "system:node:" + NodeName, []string{"system:nodes"}, []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}},
	}
	for _, s := range steps {
		if err := p.issue(s.name, s.cn, s.orgs, s.dns, s.ips); err != nil {
			return nil, err
		}
	}
	if err := p.serviceAccountKey(); err != nil {
		return nil, err
	}
	return p, nil
}

func (c *Cluster) startEtcd(ctx context.Context, clientPort, peerPort int) error {
	client, peer := "http://"+hostPort(clientPort), "http://"+hostPort(peerPort)
	proc, err := startProcess(c.Dir, "etcd", c.Binaries.Path("etcd"),
		"--name", "limen",
		"--data-dir", filepath.Join(c.Dir, "etcd-data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "limen="+peer,
		"--unsafe-no-fsync", "--log-level", "warn", "--quota-backend-bytes", strconv.Itoa(4<<30),
	)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, proc)
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return proc.waitFor(wctx, "/health", func(ctx context.Context) error {
		return httpOK(ctx, http.DefaultClient, client+"/health")
	})
}

func (c *Cluster) startAPIServer(ctx context.Context, p *pki, port, etcdPort int, tracing string) error {
	tokens, err := c.writeMonitoringToken()
	if err != nil {
		return err
	}
	extra := []string{"--token-auth-file", tokens}
	if tracing != "" {
		f := filepath.Join(c.Dir, "tracing.yaml")
		cfg := "apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\nendpoint: " + tracing + "\nsamplingRatePerMillion: 0\n"
		if err := os.WriteFile(f, []byte(cfg), 0o600); err != nil {
			return err
		}
		extra = append(extra, "--tracing-config-file", f)
	}
	c.apiArgs = append([]string{
		"--etcd-servers", "http://" + hostPort(etcdPort),
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(port),
		// The API server refuses a loopback advertise address unless it does
		// not manage the kubernetes Service endpoints itself.
		"--advertise-address", "127.0.0.1", "--endpoint-reconciler-type", "none",
		"--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "NodeRestriction",
		"--client-ca-file", p.path("ca.crt"),
		"--tls-cert-file", p.path("apiserver.crt"), "--tls-private-key-file", p.path("apiserver.key"),
		"--kubelet-client-certificate", p.path("apiserver-kubelet-client.crt"),
		"--kubelet-client-key", p.path("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority", p.path("ca.crt"),
		"--kubelet-preferred-address-types", "InternalIP",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", p.path("sa.pub"),
		"--service-account-signing-key-file", p.path("sa.key"),
		"--api-audiences", "https://kubernetes.default.svc",
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--allow-privileged", "--profiling=false", "--v", "1",
	}, extra...)
	proc, err := startProcess(c.Dir, "kube-apiserver", c.Binaries.Path("kube-apiserver"), c.apiArgs...)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, proc)

	c.Kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	if err := c.writeKubeconfig(c.Kubeconfig, p, "admin"); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400
	c.Admin = cfg
	if c.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	return proc.waitFor(wctx, "/readyz", func(ctx context.Context) error {
		return httpOK(ctx, hc, c.Server+"/readyz")
	})
}

// KillAPIServer kills kube-apiserver at once (SIGKILL), as a crash would;
// etcd, the controllers and the kubelet go on. RestartAPIServer starts it
// again.
func (c *Cluster) KillAPIServer() {
	c.mu.Lock()
	p := c.proc("kube-apiserver")
	c.mu.Unlock()
	if p == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
}

// RestartAPIServer starts kube-apiserver again after KillAPIServer, on the
// same port, certificates and etcd, and returns once it is ready.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	old := c.proc("kube-apiserver")
	c.mu.Unlock()
	if old != nil {
		select {
		case <-old.exited:
		default:
			return fmt.Errorf("kube-apiserver is still running (pid %d)", old.cmd.Process.Pid)
		}
	}
	proc, err := startProcess(c.Dir, "kube-apiserver", c.Binaries.Path("kube-apiserver"), c.apiArgs...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	for i, p := range c.procs {
		if p == old {
			c.procs[i] = proc
		}
	}
	c.mu.Unlock()
	hc, err := rest.HTTPClientFor(c.Admin)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	return proc.waitFor(wctx, "/readyz", func(ctx context.Context) error {
		return httpOK(ctx, hc, c.Server+"/readyz")
	})
}

// proc returns the component named name; c.mu is held.
func (c *Cluster) proc(name string) *process {
	for _, p := range c.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

func (c *Cluster) startControllers(p *pki) error {
	for _, name := range []string{"kube-controller-manager", "kube-scheduler"} {
		kc := filepath.Join(c.Dir, name+".kubeconfig")
		if err := c.writeKubeconfig(kc, p, name); err != nil {
			return err
		}
		args := []string{
			"--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
			"--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", "0", "--v", "1",
		}
		if name == "kube-controller-manager" {
			args = append(args,
				"--service-account-private-key-file", p.path("sa.key"),
				"--root-ca-file", p.path("ca.crt"),
				"--use-service-account-credentials",
				"--cluster-signing-cert-file", p.path("ca.crt"),
				"--cluster-signing-key-file", p.path("ca.key"),
			)
		}
		proc, err := startProcess(c.Dir, name, c.Binaries.Path(name), args...)
		if err != nil {
			return err
		}
		c.procs = append(c.procs, proc)
	}
	return nil
}

func (c *Cluster) startKubelet(ctx context.Context, p *pki, port int, logger *slog.Logger) error {
	kc := filepath.Join(c.Dir, "kubelet.kubeconfig")
	if err := c.writeKubeconfig(kc, p, "kubelet-client"); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 100, 200
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(p.path("kubelet-serving.crt"), p.path("kubelet-serving.key"))
	if err != nil {
		return err
	}
	kctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = cancel
	k := &kubelet.Kubelet{
		Client: client, NodeName: NodeName, Addr: hostPort(port), APIServer: c.Server,
		Cert: cert, ClientCAs: p.caPool(), WorkDir: filepath.Join(c.Dir, "pods"),
		Logger: logger.With("component", "kubelet"),
	}
	c.Kubelet = k
	ready := make(chan struct{})
	c.kubelet = make(chan error, 1)
	go func() { c.kubelet <- k.Run(kctx, ready) }()
	select {
	case <-ready:
		return nil
	case err := <-c.kubelet:
		c.kubelet <- err
		return fmt.Errorf("fake kubelet: %w", err)
	case <-time.After(30 * time.Second):
		return fmt.Errorf("fake kubelet did not register node %s within 30s", NodeName)
	}
}

// writeKubeconfig writes a kubeconfig authenticating with the NAME.crt/key pair.
func (c *Cluster) writeKubeconfig(path string, p *pki, name string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["limen-test"] = &clientcmdapi.Cluster{Server: c.Server, CertificateAuthority: p.path("ca.crt")}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificate: p.path(name + ".crt"), ClientKey: p.path(name + ".key")}
	cfg.Contexts["limen-test"] = &clientcmdapi.Context{Cluster: "limen-test", AuthInfo: name, Namespace: "default"}
	cfg.CurrentContext = "limen-test"
	return clientcmd.WriteToFile(*cfg, path)
}

// Stop ends every component and the fake kubelet. It does not remove Dir.
func (c *Cluster) Stop() {
	if c.cancel != nil {
		c.cancel()
		select {
		case <-c.kubelet:
		case <-time.After(10 * time.Second):
		}
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop(5 * time.Second)
	}
}

// writeMonitoringToken writes a random token of MonitoringUser to
// MonitoringTokenFile and the API server's static token file, whose path
// it returns.
func (c *Cluster) writeMonitoringToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	token := hex.EncodeToString(b)
	c.MonitoringTokenFile = filepath.Join(c.Dir, "monitoring.token")
	if err := os.WriteFile(c.MonitoringTokenFile, []byte(token), 0o600); err != nil {
		return "", err
	}
	f := filepath.Join(c.Dir, "tokens.csv")
	line := token + "," + MonitoringUser + "," + MonitoringUser + ",\"system:monitoring\"\n"
	return f, os.WriteFile(f, []byte(line), 0o600)
}

// PID returns the process id of a running component ("kube-apiserver",
// "etcd", …), or 0; benchmarks read its CPU and memory from /proc.
func (c *Cluster) PID(name string) int {
	for _, p := range c.procs {
		if p.name == name && p.cmd.Process != nil {
			return p.cmd.Process.Pid
		}
	}
	return 0
}

// Failed returns an error when a component has exited while it should run.
func (c *Cluster) Failed() error {
	for _, p := range c.procs {
		select {
		case <-p.exited:
			return p.failure()
		default:
		}
	}
	return nil
}

func httpOK(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %w", url, resp.Status, errNotReady)
	}
	return nil
}
