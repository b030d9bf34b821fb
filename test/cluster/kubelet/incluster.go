package kubelet

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// What a pod of an image this node knows (SetImage) gets, as from a real
// kubelet: the in-cluster environment, its volumes (emptyDir, configMap,
// secret, projected ServiceAccount tokens that rotate, kube-root-ca.crt,
// downward API) mounted at their mountPaths in a mount namespace of its
// own, and the image's entrypoint. Pods of other images ("local") run their
// command as before, with the environment only.

// SetImage makes image runnable on this node: a container of that image
// without a command runs entrypoint (host paths) followed by its args, with
// the pod's volumes mounted.
func (k *Kubelet) SetImage(image string, entrypoint []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.images == nil {
		k.images = map[string][]string{}
	}
	k.images[image] = append([]string(nil), entrypoint...)
}

func (k *Kubelet) image(ref string) ([]string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.images[ref]
	return e, ok
}

// SetTokenLifetime makes this kubelet treat each projected ServiceAccount
// token it writes from now on as living d when it decides to refresh it
// (at 80%, as the real kubelet does); zero restores the token's own
// lifetime. The API server issues no token shorter than 10 minutes
// (MinTokenAgeSec), too long to watch rotations in a test; the token itself
// still expires when the API server says.
func (k *Kubelet) SetTokenLifetime(d time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.tokenLifetime = d
}

// TokensIssued is how many ServiceAccount tokens this node has requested
// for the pod (all its projected token sources): one per volume at start,
// one more per rotation.
func (k *Kubelet) TokensIssued(namespace, name string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.tokens[podKey(namespace, name)]
}

// serviceEnv is what the real kubelet sets for the kubernetes Service in
// every container, pointing at the API server itself (see APIServer).
func (k *Kubelet) serviceEnv() []string {
	u, err := url.Parse(k.APIServer)
	if err != nil || u.Hostname() == "" || u.Port() == "" {
		return nil
	}
	h, p := u.Hostname(), u.Port()
	return []string{
		"KUBERNETES_SERVICE_HOST=" + h, "KUBERNETES_SERVICE_PORT=" + p, "KUBERNETES_SERVICE_PORT_HTTPS=" + p,
		"KUBERNETES_PORT=tcp://" + u.Host, "KUBERNETES_PORT_" + p + "_TCP=tcp://" + u.Host,
		"KUBERNETES_PORT_" + p + "_TCP_PROTO=tcp", "KUBERNETES_PORT_" + p + "_TCP_PORT=" + p, "KUBERNETES_PORT_" + p + "_TCP_ADDR=" + h,
	}
}

// containerEnv resolves spec.env: values, and valueFrom Secret and
// ConfigMap keys (an optional one that is missing is left out, a required
// one is an error, as CreateContainerConfigError) and pod fields.
func (p *pod) containerEnv(ctx context.Context, spec corev1.Container, obj *corev1.Pod) ([]string, error) {
	env := append(os.Environ(), "HOSTNAME="+obj.Name, "POD_NAME="+obj.Name, "POD_NAMESPACE="+obj.Namespace)
	env = append(env, p.k.serviceEnv()...)
	for _, e := range spec.Env {
		if e.ValueFrom == nil {
			env = append(env, e.Name+"="+e.Value)
			continue
		}
		v, ok, err := p.valueFrom(ctx, e.ValueFrom, obj)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			env = append(env, e.Name+"="+v)
		}
	}
	return env, nil
}

func (p *pod) valueFrom(ctx context.Context, src *corev1.EnvVarSource, obj *corev1.Pod) (string, bool, error) {
	switch {
	case src.SecretKeyRef != nil:
		r := src.SecretKeyRef
		s, err := p.k.Client.CoreV1().Secrets(obj.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		if err == nil {
			if b, ok := s.Data[r.Key]; ok {
				return string(b), true, nil
			}
		}
		if ptr.Deref(r.Optional, false) && (err == nil || apierrors.IsNotFound(err)) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("secret %s key %s: %v", r.Name, r.Key, orMissing(err))
	case src.ConfigMapKeyRef != nil:
		r := src.ConfigMapKeyRef
		cm, err := p.k.Client.CoreV1().ConfigMaps(obj.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		if err == nil {
			if v, ok := cm.Data[r.Key]; ok {
				return v, true, nil
			}
		}
		if ptr.Deref(r.Optional, false) && (err == nil || apierrors.IsNotFound(err)) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("configmap %s key %s: %v", r.Name, r.Key, orMissing(err))
	case src.FieldRef != nil:
		v, err := podField(obj, src.FieldRef.FieldPath)
		return v, err == nil, err
	}
	return "", false, fmt.Errorf("this fake kubelet resolves only secretKeyRef, configMapKeyRef and fieldRef")
}

func orMissing(err error) error {
	if err == nil {
		return fmt.Errorf("no such key")
	}
	return err
}

func podField(obj *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return obj.Name, nil
	case "metadata.namespace":
		return obj.Namespace, nil
	case "metadata.uid":
		return string(obj.UID), nil
	case "spec.serviceAccountName":
		return obj.Spec.ServiceAccountName, nil
	case "spec.nodeName":
		return obj.Spec.NodeName, nil
	case "status.podIP", "status.hostIP":
		return "127.0.0.1", nil
	}
	return "", fmt.Errorf("fieldRef %s: not served by this fake kubelet", path)
}

// volumeDir is where a volume's files live on the host.
func (p *pod) volumeDir(name string) string { return filepath.Join(p.dir, "volumes", name) }

// prepareVolumes fills every volume of the pod and starts refreshing its
// ServiceAccount tokens; it returns once all are written.
func (p *pod) prepareVolumes(ctx context.Context, obj *corev1.Pod) error {
	for _, v := range obj.Spec.Volumes {
		dir := p.volumeDir(v.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		var err error
		switch {
		case v.EmptyDir != nil:
		case v.ConfigMap != nil:
			err = p.writeConfigMap(ctx, dir, obj.Namespace, v.ConfigMap.Name, v.ConfigMap.Items, ptr.Deref(v.ConfigMap.Optional, false))
		case v.Secret != nil:
			err = p.writeSecret(ctx, dir, obj.Namespace, v.Secret.SecretName, v.Secret.Items, ptr.Deref(v.Secret.Optional, false))
		case v.Projected != nil:
			err = p.writeProjected(ctx, dir, obj, v.Projected.Sources)
		default:
			err = fmt.Errorf("this fake kubelet mounts emptyDir, configMap, secret and projected volumes only")
		}
		if err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
	}
	return nil
}

func (p *pod) writeConfigMap(ctx context.Context, dir, ns, name string, items []corev1.KeyToPath, optional bool) error {
	cm, err := p.k.Client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional {
		return nil
	}
	if err != nil {
		return fmt.Errorf("configmap %s: %w", name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return writeKeys(dir, data, items)
}

func (p *pod) writeSecret(ctx context.Context, dir, ns, name string, items []corev1.KeyToPath, optional bool) error {
	s, err := p.k.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional {
		return nil
	}
	if err != nil {
		return fmt.Errorf("secret %s: %w", name, err)
	}
	return writeKeys(dir, s.Data, items)
}

// writeKeys writes each key (or each listed item) as a file of dir.
func writeKeys(dir string, data map[string][]byte, items []corev1.KeyToPath) error {
	if len(items) == 0 {
		for k := range data {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, it := range items {
		b, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("key %s: missing", it.Key)
		}
		if err := writeAtomic(filepath.Join(dir, filepath.Clean("/" + it.Path)[1:]), b); err != nil {
			return err
		}
	}
	return nil
}

// writeAtomic replaces a file in one rename, so that a reader sees the old
// or the new content, never a part (the real kubelet swaps a symlink).
func writeAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (p *pod) writeProjected(ctx context.Context, dir string, obj *corev1.Pod, sources []corev1.VolumeProjection) error {
	for _, s := range sources {
		var err error
		switch {
		case s.ServiceAccountToken != nil:
			err = p.startToken(ctx, filepath.Join(dir, s.ServiceAccountToken.Path), obj, s.ServiceAccountToken)
		case s.ConfigMap != nil:
			err = p.writeConfigMap(ctx, dir, obj.Namespace, s.ConfigMap.Name, s.ConfigMap.Items, ptr.Deref(s.ConfigMap.Optional, false))
		case s.Secret != nil:
			err = p.writeSecret(ctx, dir, obj.Namespace, s.Secret.Name, s.Secret.Items, ptr.Deref(s.Secret.Optional, false))
		case s.DownwardAPI != nil:
			for _, it := range s.DownwardAPI.Items {
				if it.FieldRef == nil {
					return fmt.Errorf("downwardAPI %s: only fieldRef is served by this fake kubelet", it.Path)
				}
				v, ferr := podField(obj, it.FieldRef.FieldPath)
				if ferr != nil {
					return ferr
				}
				if err = writeAtomic(filepath.Join(dir, it.Path), []byte(v)); err != nil {
					return err
				}
			}
		default:
			err = fmt.Errorf("projected source %+v: not served by this fake kubelet", s)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// startToken writes a ServiceAccount token for the pod (TokenRequest, bound
// to the pod, as the real kubelet asks — the Node authorizer allows nothing
// else) and refreshes it until the pod stops: when 80% of its lifetime has
// passed, as the real kubelet's token manager does (without its jitter).
func (p *pod) startToken(ctx context.Context, path string, obj *corev1.Pod, src *corev1.ServiceAccountTokenProjection) error {
	next, err := p.requestToken(ctx, path, obj, src)
	if err != nil {
		return err
	}
	go func() {
		for {
			t := time.NewTimer(time.Until(next))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			n, err := p.requestToken(ctx, path, obj, src)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				p.k.Logger.Warn("refresh ServiceAccount token", "pod", p.namespace+"/"+p.name, "err", err)
				n = time.Now().Add(time.Second)
			}
			next = n
		}
	}()
	return nil
}

// minTokenSeconds is the shortest token the API server issues
// (k8s.io/kubernetes/pkg/apis/authentication/validation.MinTokenAgeSec).
const minTokenSeconds = 600

// requestToken writes a fresh token to path and returns when to refresh it.
func (p *pod) requestToken(ctx context.Context, path string, obj *corev1.Pod, src *corev1.ServiceAccountTokenProjection) (time.Time, error) {
	exp := ptr.Deref(src.ExpirationSeconds, 3600)
	p.k.mu.Lock()
	short := p.k.tokenLifetime
	p.k.mu.Unlock()
	if short > 0 {
		exp = minTokenSeconds // as short as the API server issues
	}
	var aud []string
	if src.Audience != "" {
		aud = []string{src.Audience}
	}
	tr, err := p.k.Client.CoreV1().ServiceAccounts(obj.Namespace).CreateToken(ctx, obj.Spec.ServiceAccountName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences: aud, ExpirationSeconds: &exp,
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: obj.Name, UID: obj.UID},
		}}, metav1.CreateOptions{})
	if err != nil {
		return time.Time{}, fmt.Errorf("TokenRequest for %s/%s: %w", obj.Namespace, obj.Spec.ServiceAccountName, err)
	}
	if err := writeAtomic(path, []byte(tr.Status.Token)); err != nil {
		return time.Time{}, err
	}
	p.k.mu.Lock()
	p.k.tokens[podKey(p.namespace, p.name)]++
	p.k.mu.Unlock()
	lifetime := time.Duration(ptr.Deref(tr.Spec.ExpirationSeconds, exp)) * time.Second
	expires := tr.Status.ExpirationTimestamp.Time
	if short > 0 {
		lifetime, expires = short, time.Now().Add(short)
	}
	p.k.Logger.Debug("ServiceAccount token written", "pod", p.namespace+"/"+p.name, "path", path, "expires", tr.Status.ExpirationTimestamp.Time)
	return expires.Add(-lifetime / 5), nil
}

// mountScript is the shell program that mounts the pod's volumes at their
// mountPaths in the container's own mount namespace (unshare --mount, so
// nothing leaks to the host), sets the pod's host name in its own UTS
// namespace, and then execs the entrypoint. A mountPath
// that exists is bind-mounted over; one that does not is made in an
// overlay over its nearest existing directory, so the host's files stay
// visible and untouched. The entrypoint is opened before anything is
// mounted: a volume may hide the directory it lives in (/tmp).
func (c *container) mountScript(argv []string) ([]string, error) {
	type bind struct{ src, dst, ovl string }
	var first, last []bind
	work, _ := filepath.EvalSymlinks(c.pod.k.WorkDir)
	for _, m := range c.spec.VolumeMounts {
		if !filepath.IsAbs(m.MountPath) {
			return nil, fmt.Errorf("mountPath %q: not absolute", m.MountPath)
		}
		src := c.pod.volumeDir(m.Name)
		if m.SubPath != "" {
			src = filepath.Join(src, filepath.Clean("/" + m.SubPath)[1:])
		}
		dst, anc := resolveMountPath(m.MountPath)
		b := bind{src: src, dst: dst}
		if anc != dst {
			if anc == "/" {
				return nil, fmt.Errorf("mountPath %s: this fake kubelet makes a missing path in an overlay of its nearest existing directory, and for %s that is /", m.MountPath, m.MountPath)
			}
			if within(work, anc) {
				return nil, fmt.Errorf("mountPath %s: its overlay over %s would hide the kubelet's own directory %s", m.MountPath, anc, work)
			}
			b.ovl = anc
		}
		// A mount over an ancestor of the work directory hides the later
		// mounts' sources: those go last, one at most.
		if within(work, dst) {
			last = append(last, b)
		} else {
			first = append(first, b)
		}
	}
	if len(last) > 1 {
		return nil, fmt.Errorf("more than one mountPath hides this kubelet's directory %s", work)
	}
	var sh strings.Builder
	sh.WriteString("set -e\nexec 3<\"$1\"\nshift\n")
	overlaid := map[string]bool{}
	for i, b := range append(first, last...) {
		if b.ovl != "" && !overlaid[b.ovl] {
			o := filepath.Join(c.pod.dir, "overlay", fmt.Sprint(i))
			for _, d := range []string{"upper", "work"} {
				if err := os.MkdirAll(filepath.Join(o, d), 0o755); err != nil {
					return nil, err
				}
			}
			fmt.Fprintf(&sh, "mount -t overlay overlay -o %s %s\n", shq("lowerdir="+b.ovl+",upperdir="+o+"/upper,workdir="+o+"/work"), shq(b.ovl))
			overlaid[b.ovl] = true
		}
		if b.ovl != "" {
			fmt.Fprintf(&sh, "mkdir -p %s\n", shq(b.dst))
		}
		fmt.Fprintf(&sh, "mount --bind %s %s\n", shq(b.src), shq(b.dst))
	}
	for _, m := range c.spec.VolumeMounts {
		if m.ReadOnly {
			dst, _ := resolveMountPath(m.MountPath)
			fmt.Fprintf(&sh, "mount -o remount,bind,ro %s\n", shq(dst))
		}
	}
	// Its own host name, the pod's, as a real kubelet gives it (a worker
	// names itself by it).
	fmt.Fprintf(&sh, "echo %s > /proc/sys/kernel/hostname\n", shq(c.pod.name))
	sh.WriteString("exec /proc/self/fd/3 \"$@\"\n")
	wrap := []string{"unshare", "--mount", "--uts", "--propagation", "private"}
	if os.Geteuid() != 0 {
		wrap = append(wrap, "--user", "--map-root-user")
	}
	wrap = append(wrap, "--", "/bin/sh", "-c", sh.String(), "limen-fake-kubelet-mounts", argv[0])
	return append(wrap, argv[1:]...), nil
}

// resolveMountPath returns the path a mount lands on, its existing part
// with symlinks resolved (/var/run is /run), and the nearest existing
// directory: the path itself when it exists.
func resolveMountPath(p string) (dst, existing string) {
	p = filepath.Clean(p)
	rest := ""
	for cur := p; ; cur = filepath.Dir(cur) {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(r, rest), r
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		if cur == "/" {
			return p, "/"
		}
	}
}

// within reports whether path is dir or inside it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
