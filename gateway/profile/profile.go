// Package profile keeps a user's Limen credentials on their machine: one
// directory per proxy under ~/.limen (mode 0700) holding the private key,
// the short-lived certificate and the proxy's CA (each 0600), plus the
// kubeconfigs `limen kube login` writes.
package profile

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/identity"
)

// File names inside a profile directory.
const (
	FileKey  = "key.pem"
	FileCert = "cert.pem"
	FileCA   = "ca.pem"
	// fileCurrent, in the home directory, names the last proxy logged in to.
	fileCurrent = "current"
)

// Errors that tell the user to log in.
var (
	ErrNotLoggedIn = errors.New("not logged in")
	ErrExpired     = errors.New("certificate expired")
)

// Home is $LIMEN_HOME, or ~/.limen.
func Home() (string, error) {
	if h := os.Getenv("LIMEN_HOME"); h != "" {
		return h, nil
	}
	u, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find the home directory: %w: set LIMEN_HOME", err)
	}
	return filepath.Join(u, ".limen"), nil
}

// CheckProxy validates a HOST:PORT proxy address.
func CheckProxy(proxy string) error {
	host, port, err := net.SplitHostPort(proxy)
	if err != nil || host == "" {
		return fmt.Errorf("proxy %q: want HOST:PORT, for example limen.example.com:443", proxy)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("proxy %q: port must be 1-65535", proxy)
	}
	for _, r := range host {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == ':'
		if !ok {
			return fmt.Errorf("proxy %q: host may hold only letters, digits, '.', '-' (and ':' in IPv6)", proxy)
		}
	}
	if strings.Contains(host, "..") {
		return fmt.Errorf("proxy %q: host must not contain \"..\"", proxy)
	}
	return nil
}

// dirName maps HOST:PORT to a directory name. Colons become '_' so the path
// can be listed in KUBECONFIG, whose separator is ':'.
func dirName(proxy string) string { return strings.ReplaceAll(proxy, ":", "_") }

// Profile is the directory of one proxy's credentials.
type Profile struct {
	// Proxy is HOST:PORT.
	Proxy string
	// Dir is the directory.
	Dir string
}

// Open returns the profile of proxy under home, without creating it.
func Open(home, proxy string) (*Profile, error) {
	if err := CheckProxy(proxy); err != nil {
		return nil, err
	}
	return &Profile{Proxy: proxy, Dir: filepath.Join(home, dirName(proxy))}, nil
}

// Ensure creates the profile directory with mode 0700 (and home, too).
func (p *Profile) Ensure() error {
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return fmt.Errorf("create profile directory: %w", err)
	}
	if err := os.Chmod(p.Dir, 0o700); err != nil {
		return fmt.Errorf("create profile directory: %w", err)
	}
	return nil
}

func (p *Profile) path(name string) string { return filepath.Join(p.Dir, name) }

// SaveCredentials stores the key and certificate, and the CA when caPEM is
// not nil.
func (p *Profile) SaveCredentials(keyPEM, certPEM, caPEM []byte) error {
	if err := p.Ensure(); err != nil {
		return err
	}
	if caPEM != nil {
		if err := ca.WriteFileAtomic(p.path(FileCA), caPEM, 0o600); err != nil {
			return err
		}
	}
	if err := ca.WriteFileAtomic(p.path(FileKey), keyPEM, 0o600); err != nil {
		return err
	}
	return ca.WriteFileAtomic(p.path(FileCert), certPEM, 0o600)
}

// Logout removes the key and certificate, and every application
// certificate made from them; the CA and kubeconfigs stay so the next login
// trusts the same proxy.
func (p *Profile) Logout() (bool, error) {
	if err := p.RemoveApps(); err != nil {
		return false, fmt.Errorf("logout: %w", err)
	}
	if err := p.RemoveRequests(); err != nil {
		return false, fmt.Errorf("logout: %w", err)
	}
	removed := false
	for _, f := range []string{FileCert, FileKey} {
		err := os.Remove(p.path(f))
		if err == nil {
			removed = true
		} else if !errors.Is(err, fs.ErrNotExist) {
			return removed, fmt.Errorf("logout: %w", err)
		}
	}
	return removed, nil
}

// Credentials are a loaded key and certificate.
type Credentials struct {
	KeyPEM, CertPEM []byte
	Cert            *x509.Certificate
	Principal       identity.Principal
	TLS             tls.Certificate
}

// Credentials loads the key and certificate. They must be private (the
// directory 0700, the files 0600, no symbolic links) and the certificate
// unexpired at now; otherwise the error says what to do.
func (p *Profile) Credentials(now time.Time) (*Credentials, error) {
	if err := checkPrivate(p.Dir, true); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w to %s: run limen login --proxy %s", ErrNotLoggedIn, p.Proxy, p.Proxy)
		}
		return nil, err
	}
	keyPEM, err := readPrivate(p.path(FileKey))
	if err == nil {
		var certPEM []byte
		if certPEM, err = readPrivate(p.path(FileCert)); err == nil {
			return p.parseCredentials(keyPEM, certPEM, now)
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w to %s: run limen login --proxy %s", ErrNotLoggedIn, p.Proxy, p.Proxy)
	}
	return nil, err
}

func (p *Profile) parseCredentials(keyPEM, certPEM []byte, now time.Time) (*Credentials, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("credentials in %s are damaged (%v): run limen login --proxy %s", p.Dir, err, p.Proxy)
	}
	c := &Credentials{KeyPEM: keyPEM, CertPEM: certPEM, Cert: pair.Leaf, TLS: pair}
	if !now.Before(pair.Leaf.NotAfter) {
		return c, fmt.Errorf("%w at %s: run limen login --proxy %s", ErrExpired, pair.Leaf.NotAfter.Local().Format(time.RFC3339), p.Proxy)
	}
	if c.Principal, err = ca.PrincipalOfCert(pair.Leaf); err != nil {
		return nil, fmt.Errorf("certificate in %s: %v: run limen login --proxy %s", p.Dir, err, p.Proxy)
	}
	return c, nil
}

// CAPEM returns the stored proxy CA, or nil when the proxy is trusted
// through the system roots.
func (p *Profile) CAPEM() ([]byte, error) {
	data, err := readPrivate(p.path(FileCA))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return data, err
}

func checkPrivate(path string, dir bool) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s is a symbolic link: Limen keeps credentials only in real files; remove it and run limen login", path)
	case dir && !fi.IsDir():
		return fmt.Errorf("%s is not a directory: remove it and run limen login", path)
	case !dir && !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file: remove it and run limen login", path)
	case fi.Mode().Perm()&0o077 != 0:
		want := "600"
		if dir {
			want = "700"
		}
		return fmt.Errorf("%s is accessible by other users (mode %04o): run chmod %s %s", path, fi.Mode().Perm(), want, path)
	}
	return nil
}

// readPrivate reads a file that must be private; hostile states (a symlink,
// group/world access, a huge file) are refused.
func readPrivate(path string) ([]byte, error) {
	if err := checkPrivate(path, false); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 64<<10+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > 64<<10 {
		return nil, fmt.Errorf("%s is larger than 64 KiB: it is not a Limen credential", path)
	}
	return data, nil
}

// SetCurrent records proxy as the default for commands without --proxy.
func SetCurrent(home, proxy string) error {
	if err := os.MkdirAll(home, 0o700); err != nil {
		return err
	}
	return ca.WriteFileAtomic(filepath.Join(home, fileCurrent), []byte(proxy+"\n"), 0o600)
}

// Current returns the proxy of the last login.
func Current(home string) (string, error) {
	data, err := os.ReadFile(filepath.Join(home, fileCurrent))
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: run limen login --proxy HOST:PORT", ErrNotLoggedIn)
	}
	if err != nil {
		return "", err
	}
	proxy := strings.TrimSpace(string(data))
	if err := CheckProxy(proxy); err != nil {
		return "", fmt.Errorf("%s: %w", filepath.Join(home, fileCurrent), err)
	}
	return proxy, nil
}
