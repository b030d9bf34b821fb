package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// pod is one Pod bound to this node, its containers running as processes.
type pod struct {
	k         *Kubelet
	namespace string
	name      string
	uid       types.UID
	dir       string
	policy    corev1.RestartPolicy
	started   time.Time

	mu         sync.Mutex
	containers []*container
	stopping   bool

	dirty  chan struct{} // status needs reporting
	cancel context.CancelFunc
	done   chan struct{}
	// gone ends when the pod's containers stopped for good (deleted):
	// what runs inside it (exec, attach) dies and what connects into it
	// (port-forward) breaks, as with a real kubelet, whose containers and
	// network namespace go with the pod.
	gone context.Context
	kill context.CancelFunc
}

// within is ctx, ended too when the pod is gone.
func (p *pod) within(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(p.gone, cancel)
	return ctx, func() { stop(); cancel() }
}

func podKey(namespace, name string) string { return namespace + "/" + name }

// watchPods runs pods bound to this node as they appear and stops them as
// they are deleted, until ctx ends.
func (k *Kubelet) watchPods(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(k.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", k.NodeName).String()
		}))
	inf := factory.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.sync(ctx, obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { k.sync(ctx, obj.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				k.forget(p)
			} else if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				if p, ok := d.Obj.(*corev1.Pod); ok {
					k.forget(p)
				}
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
	return nil
}

func (k *Kubelet) lookup(namespace, name string) (*pod, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.pods[podKey(namespace, name)]
	return p, ok
}

func (k *Kubelet) sync(ctx context.Context, obj *corev1.Pod) {
	key := podKey(obj.Namespace, obj.Name)
	k.mu.Lock()
	p, known := k.pods[key]
	if known && p.uid != obj.UID { // same name, new pod
		k.mu.Unlock()
		k.forget(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: obj.Namespace, Name: obj.Name}})
		k.mu.Lock()
		known = false
	}
	if !known {
		if obj.DeletionTimestamp != nil || obj.Status.Phase == corev1.PodSucceeded || obj.Status.Phase == corev1.PodFailed {
			k.mu.Unlock()
			if obj.DeletionTimestamp != nil {
				k.finalize(ctx, obj.Namespace, obj.Name, obj.UID)
			}
			return
		}
		p = k.newPod(obj)
		k.pods[key] = p
		k.mu.Unlock()
		pctx, cancel := context.WithCancel(ctx)
		p.cancel = cancel
		go p.run(pctx, obj)
		return
	}
	k.mu.Unlock()
	if obj.DeletionTimestamp != nil {
		go p.terminate(ctx, obj)
	}
}

func (k *Kubelet) newPod(obj *corev1.Pod) *pod {
	gone, kill := context.WithCancel(context.Background())
	return &pod{gone: gone, kill: kill,
		k: k, namespace: obj.Namespace, name: obj.Name, uid: obj.UID,
		dir:    filepath.Join(k.WorkDir, obj.Namespace+"_"+obj.Name+"_"+string(obj.UID)),
		policy: obj.Spec.RestartPolicy, started: time.Now(),
		dirty: make(chan struct{}, 1), done: make(chan struct{}),
	}
}

// forget stops a pod that is gone from the API server.
func (k *Kubelet) forget(obj *corev1.Pod) {
	k.mu.Lock()
	p, ok := k.pods[podKey(obj.Namespace, obj.Name)]
	delete(k.pods, podKey(obj.Namespace, obj.Name))
	k.mu.Unlock()
	if ok {
		p.stopAll(time.Second)
		p.kill()
		p.cancel()
	}
}

func (k *Kubelet) killAll() {
	k.mu.Lock()
	pods := make([]*pod, 0, len(k.pods))
	for _, p := range k.pods {
		pods = append(pods, p)
	}
	k.mu.Unlock()
	for _, p := range pods {
		p.stopAll(time.Second)
		p.kill()
		p.cancel()
	}
}

func (p *pod) run(ctx context.Context, obj *corev1.Pod) {
	defer close(p.done)
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		p.k.Logger.Error("pod dir", "pod", p.name, "err", err)
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	// Volumes are filled only for pods that run an image this node knows:
	// a "local" pod's command runs on the host as it is.
	var volErr error
	for _, spec := range obj.Spec.Containers {
		if _, ok := p.k.image(spec.Image); ok {
			volErr = p.prepareVolumes(ctx, obj)
			break
		}
	}
	p.mu.Lock()
	for _, spec := range obj.Spec.Containers {
		env, err := p.containerEnv(ctx, spec, obj)
		if err == nil {
			err = volErr
		}
		c := newContainer(p, spec, env, err)
		p.containers = append(p.containers, c)
		wg.Go(func() { c.supervise(ctx) })
	}
	p.mu.Unlock()
	p.reportLoop(ctx)
}

func (p *pod) container(name string) (*container, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.containers {
		if c.spec.Name == name || name == "" {
			return c, nil
		}
	}
	return nil, fmt.Errorf("container %q not found in pod %s/%s", name, p.namespace, p.name)
}

func (p *pod) changed() {
	select {
	case p.dirty <- struct{}{}:
	default:
	}
}

// reportLoop writes the pod's status whenever a container changes state.
func (p *pod) reportLoop(ctx context.Context) {
	p.changed()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.dirty:
		}
		if err := p.reportStatus(ctx); err != nil && ctx.Err() == nil && !apierrors.IsNotFound(err) {
			p.k.Logger.Warn("update pod status", "pod", p.namespace+"/"+p.name, "err", err)
			time.AfterFunc(time.Second, p.changed)
		}
	}
}

func (p *pod) reportStatus(ctx context.Context) error {
	pods := p.k.Client.CoreV1().Pods(p.namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := pods.Get(ctx, p.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != p.uid {
			return nil
		}
		cur.Status = p.status(cur.Status)
		_, err = pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

func (p *pod) status(prev corev1.PodStatus) corev1.PodStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := corev1.PodStatus{
		HostIP: "127.0.0.1", HostIPs: []corev1.HostIP{{IP: "127.0.0.1"}},
		PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}},
		StartTime: ptr.To(metav1.NewTime(p.started)), QOSClass: prev.QOSClass,
	}
	running, failed, pending := 0, 0, 0
	for _, c := range p.containers {
		cs := c.status()
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
		switch {
		case cs.State.Running != nil:
			running++
		case cs.State.Terminated != nil && cs.State.Terminated.ExitCode != 0:
			failed++
		case cs.State.Waiting != nil:
			pending++
		}
	}
	ready := running == len(p.containers) && running > 0
	switch {
	case pending > 0 || running > 0:
		st.Phase = corev1.PodRunning
		if running == 0 {
			st.Phase = corev1.PodPending
		}
	case failed > 0:
		st.Phase = corev1.PodFailed
	default:
		st.Phase = corev1.PodSucceeded
	}
	now := metav1.Now()
	cond := func(t corev1.PodConditionType, ok bool) corev1.PodCondition {
		s := corev1.ConditionFalse
		if ok {
			s = corev1.ConditionTrue
		}
		return corev1.PodCondition{Type: t, Status: s, LastTransitionTime: now}
	}
	st.Conditions = []corev1.PodCondition{
		cond(corev1.PodReadyToStartContainers, true), cond(corev1.PodInitialized, true),
		cond(corev1.ContainersReady, ready), cond(corev1.PodReady, ready), cond(corev1.PodScheduled, true),
	}
	return st
}

// maxGrace caps a deletion's grace period on this test node: long enough
// for Limen's own drain (the chart's 30 s), short enough that a process
// that ignores SIGTERM does not hold a test up for long.
const maxGrace = 30 * time.Second

// terminate honours a deletion: stop the containers within the grace period
// (capped at maxGrace), report, and remove the Pod object.
func (p *pod) terminate(ctx context.Context, obj *corev1.Pod) {
	grace := maxGrace
	if g := obj.DeletionGracePeriodSeconds; g != nil && time.Duration(*g)*time.Second < grace {
		grace = time.Duration(*g) * time.Second
	}
	p.mu.Lock()
	if p.stopping {
		p.mu.Unlock()
		return
	}
	p.stopping = true
	p.mu.Unlock()
	p.stopAll(grace)
	p.kill()
	_ = p.reportStatus(ctx)
	p.k.finalize(ctx, p.namespace, p.name, p.uid)
}

func (k *Kubelet) finalize(ctx context.Context, namespace, name string, uid types.UID) {
	err := k.Client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		k.Logger.Warn("delete pod", "pod", namespace+"/"+name, "err", err)
	}
}

func (p *pod) stopAll(grace time.Duration) {
	p.mu.Lock()
	p.stopping = true
	cs := append([]*container(nil), p.containers...)
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { c.stop(grace) })
	}
	wg.Wait()
}

func (p *pod) isStopping() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopping
}
