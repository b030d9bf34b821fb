package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The baseline is the careless one-hop proxy Limen is measured against: a
// bare httputil.ReverseProxy, TLS on both sides, that sends every request to
// the API server with one static token and fixed Impersonate-* headers. It
// checks nothing, audits nothing and signs nothing; what Limen adds over it
// is the price of its policy, grants, tunnel and durable audit.

// baselineUser and baselineGroups are whom the baseline impersonates: the
// user and groups Limen impersonates for alice, so the API server does the
// same impersonation and RBAC work on both paths.
const baselineUser = "alice"

var baselineGroups = []string{"limen:edit", "limen:view"}

// serveBaseline runs the baseline proxy until it is signalled.
func serveBaseline(args []string) error {
	fs := flag.NewFlagSet("serve-baseline", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	certFile := fs.String("cert", "", "the proxy's TLS certificate (PEM)")
	keyFile := fs.String("key", "", "the proxy's TLS key (PEM)")
	upstream := fs.String("upstream", "", "the API server's URL")
	caFile := fs.String("ca", "", "the API server's CA (PEM)")
	tokenFile := fs.String("token", "", "the static bearer token sent upstream")
	if err := fs.Parse(args); err != nil {
		return err
	}
	target, err := url.Parse(*upstream)
	if err != nil || target.Scheme != "https" {
		return fmt.Errorf("-upstream %q: want the API server's https URL", *upstream)
	}
	ca, err := os.ReadFile(*caFile)
	if err != nil {
		return fmt.Errorf("-ca: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return fmt.Errorf("-ca %s: no PEM certificate", *caFile)
	}
	token, err := os.ReadFile(*tokenFile)
	if err != nil {
		return fmt.Errorf("-token: %w", err)
	}
	bearer := "Bearer " + strings.TrimSpace(string(token))
	upstreamTLS := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	transport := &http.Transport{
		TLSClientConfig:     upstreamTLS,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 100,
		IdleConnTimeout:     90 * time.Second,
	}
	// An upgrade (exec, port-forward) goes upstream over HTTP/1.1, the only
	// protocol that upgrades: a careless proxy still carries streams.
	// (Not transport.Clone: Clone sets HTTP/2 up first, and its TLS config
	// would still offer h2.)
	h1 := upstreamTLS.Clone()
	h1.NextProtos = []string{"http/1.1"}
	upgrades := &http.Transport{
		TLSClientConfig: h1,
		TLSNextProto:    map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	rp := &httputil.ReverseProxy{
		Transport:     byUpgrade{plain: transport, upgrade: upgrades},
		FlushInterval: -1, // watches
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Header.Set("Authorization", bearer)
			r.Out.Header.Set("Impersonate-User", baselineUser)
			r.Out.Header.Del("Impersonate-Group")
			for _, g := range baselineGroups {
				r.Out.Header.Add("Impersonate-Group", g)
			}
		},
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Addr: *addr, Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServeTLS(*certFile, *keyFile); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// byUpgrade sends an upgrade request through upgrade and any other
// through plain.
type byUpgrade struct{ plain, upgrade http.RoundTripper }

func (b byUpgrade) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Upgrade") != "" {
		return b.upgrade.RoundTrip(r)
	}
	return b.plain.RoundTrip(r)
}

// startBaseline runs `limen-bench serve-baseline` as its own process (so
// its CPU is read from /proc like the gateway's) in front of server (the
// API server, or another baseline for two careless hops, whose CA is then
// that baseline's certificate), and returns its target and PID. name names
// the target and its files in dir.
func startBaseline(ctx context.Context, dir, name, server, caFile, tokenFile string) (target, int, func(), error) {
	certFile, keyFile := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	certPEM, err := selfSigned(certFile, keyFile)
	if err != nil {
		return target{}, 0, nil, fmt.Errorf("baseline certificate: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return target{}, 0, nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	self, err := os.Executable()
	if err != nil {
		return target{}, 0, nil, err
	}
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return target{}, 0, nil, err
	}
	cmd := exec.Command(self, "serve-baseline", "-addr", addr, "-cert", certFile, "-key", keyFile,
		"-upstream", server, "-ca", caFile, "-token", tokenFile)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return target{}, 0, nil, fmt.Errorf("baseline: %w", err)
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		logf.Close()
	}
	// client-go's transport, as for the other two targets; the careless
	// proxy asks its clients for no credentials.
	hc, err := rest.HTTPClientFor(&rest.Config{Host: "https://" + addr, TLSClientConfig: rest.TLSClientConfig{CAData: certPEM}})
	if err != nil {
		stop()
		return target{}, 0, nil, err
	}
	kubeconfig := filepath.Join(dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(kubeconfigFor("https://"+addr, certPEM), kubeconfig); err != nil {
		stop()
		return target{}, 0, nil, err
	}
	t := target{name: name, base: "https://" + addr, client: hc, certFile: certFile, kubeconfig: kubeconfig}
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := hc.Get(t.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return t, cmd.Process.Pid, stop, nil
			}
			err = fmt.Errorf("/readyz answered %s", resp.Status)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return target{}, 0, nil, fmt.Errorf("%s not ready within 15s (log: %s): %w", name, logf.Name(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kubeconfigFor is a kubeconfig for a careless proxy at server, trusted by
// its certificate. Its token is a stand-in that the proxy replaces with its
// own; without one kubectl would prompt for a user name.
func kubeconfigFor(server string, caPEM []byte) clientcmdapi.Config {
	return clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"careless": {Server: server, CertificateAuthorityData: caPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"careless": {Token: "replaced-by-the-careless-proxy"}},
		Contexts:       map[string]*clientcmdapi.Context{"careless": {Cluster: "careless", AuthInfo: "careless"}},
		CurrentContext: "careless",
	}
}

// selfSigned writes a P-256 certificate for 127.0.0.1 and its key, and
// returns the certificate's PEM.
func selfSigned(certFile, keyFile string) ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "limen-bench baseline"},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, err
	}
	return certPEM, nil
}
