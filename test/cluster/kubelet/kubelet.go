// Package kubelet is a fake kubelet for test control planes: it registers a
// Ready Node, runs each Pod's containers as local processes (under a pty when
// the container asks for a tty), reports their status, and serves the
// exec, attach, portForward and containerLogs endpoints that the API server
// proxies to, using the Kubernetes streaming libraries.
package kubelet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Kubelet is one fake node. Fill the fields and call Run.
type Kubelet struct {
	Client    kubernetes.Interface // authenticated as system:node:NodeName
	NodeName  string
	Addr      string          // 127.0.0.1:PORT to serve the kubelet API on
	Cert      tls.Certificate // serving certificate with IP SAN 127.0.0.1
	ClientCAs *x509.CertPool  // the CA of the API server's kubelet client certificate
	WorkDir   string          // one subdirectory per pod
	Logger    *slog.Logger
	// APIServer is the API server's https://HOST:PORT, which pods see as
	// KUBERNETES_SERVICE_HOST and _PORT: this node has no service proxy, so
	// the kubernetes Service's address would lead nowhere.
	APIServer string
	images    map[string][]string // image → host argv of its entrypoint (SetImage)
	tokens    map[string]int      // namespace/name → ServiceAccount tokens issued
	// tokenLifetime: see SetTokenLifetime.
	tokenLifetime time.Duration

	mu   sync.Mutex
	pods map[string]*pod // by namespace/name
	// Seen records which streaming transports the API server used toward
	// this kubelet, for tests ("exec:SPDY/v4.channel.k8s.io", …).
	seen map[string]int
}

// Run registers the node, serves the kubelet API and runs pods until ctx
// ends. ready is closed once the node is registered and the server listens.
func (k *Kubelet) Run(ctx context.Context, ready chan<- struct{}) error {
	k.mu.Lock()
	k.pods = map[string]*pod{}
	k.seen = map[string]int{}
	if k.images == nil {
		k.images = map[string][]string{}
	}
	k.tokens = map[string]int{}
	k.mu.Unlock()
	if err := os.MkdirAll(k.WorkDir, 0o755); err != nil {
		return err
	}
	l, err := net.Listen("tcp", k.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", k.Addr, err)
	}
	srv := &http.Server{
		Handler: k.routes(),
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{k.Cert},
			ClientCAs:    k.ClientCAs,
			ClientAuth:   tls.RequireAndVerifyClientCert,
			NextProtos:   []string{"http/1.1"}, // upgrades hijack the connection: no HTTP/2
			MinVersion:   tls.VersionTLS12,
		},
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(k.Logger.Handler(), slog.LevelDebug),
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		if err := srv.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			k.Logger.Error("kubelet server", "err", err)
		}
	})
	defer srv.Close()
	defer k.killAll()

	if err := k.registerNode(ctx); err != nil {
		return fmt.Errorf("register node %s: %w", k.NodeName, err)
	}
	close(ready)
	wg.Go(func() { k.heartbeat(ctx) })
	return k.watchPods(ctx)
}

// Seen returns how often each streaming transport reached this kubelet.
func (k *Kubelet) Seen() map[string]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]int, len(k.seen))
	for key, n := range k.seen {
		out[key] = n
	}
	return out
}

func (k *Kubelet) port() int32 {
	_, p, _ := net.SplitHostPort(k.Addr)
	n, _ := strconv.Atoi(p)
	return int32(n)
}

func (k *Kubelet) registerNode(ctx context.Context) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: k.NodeName, Labels: map[string]string{
			"kubernetes.io/hostname": k.NodeName, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		}},
	}
	_, err := k.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return k.updateNodeStatus(ctx)
}

func (k *Kubelet) updateNodeStatus(ctx context.Context) error {
	node, err := k.Client.CoreV1().Nodes().Get(ctx, k.NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("16"),
		corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourcePods:   resource.MustParse("250"),
	}
	node.Status = corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "fake kubelet is ready", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		// Only an InternalIP: the API server tries Hostname first otherwise.
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: k.port()}},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion: "v1.37.2", ContainerRuntimeVersion: "limen-fake://1", OperatingSystem: "linux",
			Architecture: "amd64", OSImage: "limen fake kubelet", KernelVersion: "local",
		},
	}
	_, err = k.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	return err
}

// heartbeat renews the node Lease every 10 s and the Ready condition every
// 30 s, so the node lifecycle controller never marks the node NotReady.
func (k *Kubelet) heartbeat(ctx context.Context) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for i := 0; ; i++ {
		if err := k.renewLease(ctx); err != nil && ctx.Err() == nil {
			k.Logger.Warn("renew node lease", "err", err)
		}
		if i%3 == 2 {
			if err := k.updateNodeStatus(ctx); err != nil && ctx.Err() == nil {
				k.Logger.Warn("update node status", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (k *Kubelet) renewLease(ctx context.Context) error {
	leases := k.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, k.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: k.NodeName, Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(k.NodeName), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now,
			},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

func (k *Kubelet) recordTransport(key string) {
	k.mu.Lock()
	k.seen[key]++
	k.mu.Unlock()
}
