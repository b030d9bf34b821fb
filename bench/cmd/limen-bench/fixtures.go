package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The fixtures' names.
const (
	nsGet     = "bench-get"   // one ConfigMap, "one"
	nsList    = "bench-list"  // listSize ConfigMaps
	nsWatch   = "bench-watch" // empty: its watches stay idle
	nsPods    = "bench-pods"  // the exec and port-forward pods
	listSize  = 500
	execPod   = "sleeper"
	serverPod = "zeros"
)

// createFixtures creates the namespaces and ConfigMaps the latency and watch
// figures read.
func createFixtures(ctx context.Context, client kubernetes.Interface) error {
	for _, ns := range []string{nsGet, nsList, nsWatch, nsPods} {
		_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace %s: %w", ns, err)
		}
	}
	if err := createConfigMap(ctx, client, nsGet, "one"); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, listSize)
	sem := make(chan struct{}, 16)
	for i := range listSize {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := createConfigMap(ctx, client, nsList, fmt.Sprintf("cm-%03d", i)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs // nil when none failed
}

// createConfigMap creates a ConfigMap with about 256 bytes of data, a
// typical small configuration object.
func createConfigMap(ctx context.Context, client kubernetes.Interface, ns, name string) error {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "limen-bench"}},
		Data:       map[string]string{"config.yaml": strings.Repeat("key: value\n", 23)},
	}
	_, err := client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create configmap %s/%s: %w", ns, name, err)
	}
	return nil
}

// startPods runs the exec target (sleep) and the port-forward target (this
// binary's serve-zero: zeros on zeroPort, a sink on sinkPort) and waits
// until both run.
func startPods(ctx context.Context, client kubernetes.Interface, self string, zeroPort, sinkPort int) error {
	if err := waitServiceAccount(ctx, client, nsPods); err != nil {
		return err
	}
	pods := map[string][]string{
		execPod: {"sleep", "3600"},
		serverPod: {self, "serve-zero", "-addr", fmt.Sprintf("127.0.0.1:%d", zeroPort),
			"-sink-addr", fmt.Sprintf("127.0.0.1:%d", sinkPort), "-for", "1h"},
	}
	for name, argv := range pods {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{
				Containers:                    []corev1.Container{{Name: name, Image: "local", Command: argv}},
				TerminationGracePeriodSeconds: new(int64),
			},
		}
		if _, err := client.CoreV1().Pods(nsPods).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s: %w", name, err)
		}
	}
	for name := range pods {
		if err := waitRunning(ctx, client, nsPods, name); err != nil {
			return err
		}
	}
	return nil
}

func waitServiceAccount(ctx context.Context, client kubernetes.Interface, ns string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("namespace %s: no default ServiceAccount: %w", ns, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitRunning(ctx context.Context, client kubernetes.Interface, ns, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("pod %s/%s not running: %v", ns, name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
