// Package s3server runs a real S3-compatible server for tests: versitygw
// (github.com/versity/versitygw) with its POSIX backend, built from the Go
// module proxy at the version pinned in build/go.mod and cached like the
// test control plane (test/cluster), under limen/s3server in the user cache
// directory keyed by that version and the build's inputs. It listens on a
// loopback port and keeps its objects in a directory of the test's, so that
// a test can stop it (an outage) and start it again with the same objects.
package s3server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Credentials of the server's root account, which the tests use.
const (
	AccessKey = "limen-test-access"
	SecretKey = "limen-test-secret-key-0123456789"
	Region    = "us-east-1"
)

// buildDir is the module that pins versitygw.
func buildDir() (string, error) {
	if d := os.Getenv("LIMEN_S3SERVER_SRC"); d != "" {
		return d, nil
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate test/s3server/build: set LIMEN_S3SERVER_SRC")
	}
	return filepath.Join(filepath.Dir(file), "build"), nil
}

// version is the pinned versitygw version, read from build/go.mod.
func version(gomod []byte) (string, error) {
	for _, line := range strings.Split(string(gomod), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "require" && f[1] == "github.com/versity/versitygw" {
			return f[2], nil
		}
	}
	return "", errors.New("test/s3server/build/go.mod does not require github.com/versity/versitygw")
}

var buildOnce struct {
	sync.Mutex
	path string
}

// Build builds versitygw once per pinned version and returns its path. A
// cached binary whose inputs (go.mod, go.sum, Go version) are unchanged is
// reused without running the go command. Progress goes to progress.
func Build(ctx context.Context, progress io.Writer) (string, error) {
	buildOnce.Lock()
	defer buildOnce.Unlock()
	if buildOnce.path != "" {
		return buildOnce.path, nil
	}
	src, err := buildDir()
	if err != nil {
		return "", err
	}
	gomod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("s3server: %w", err)
	}
	gosum, err := os.ReadFile(filepath.Join(src, "go.sum"))
	if err != nil {
		return "", fmt.Errorf("s3server: %w", err)
	}
	v, err := version(gomod)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", runtime.Version())
	h.Write(gomod)
	h.Write(gosum)
	cache := os.Getenv("LIMEN_S3SERVER_CACHE")
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("no user cache directory (set LIMEN_S3SERVER_CACHE): %w", err)
		}
		cache = filepath.Join(base, "limen", "s3server")
	}
	out := filepath.Join(cache, v+"-"+hex.EncodeToString(h.Sum(nil))[:16])
	bin := filepath.Join(out, "versitygw")
	if _, err := os.Stat(bin); err == nil {
		buildOnce.path = bin
		return bin, nil
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", fmt.Errorf("create build cache: %w", err)
	}
	tmp := bin + fmt.Sprintf(".tmp-%d", os.Getpid())
	fmt.Fprintf(progress, "s3server: building versitygw %s (the first build takes minutes; later runs reuse %s)\n", v, out)
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", tmp, "github.com/versity/versitygw/cmd/versitygw")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build versitygw %s: %w\n%s", v, err, b)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("install versitygw: %w", err)
	}
	fmt.Fprintf(progress, "s3server: built versitygw %s in %s\n", v, time.Since(start).Round(time.Second))
	buildOnce.path = bin
	return bin, nil
}

// Server is a running versitygw.
type Server struct {
	// Endpoint is its URL, http://127.0.0.1:PORT.
	Endpoint string
	bin, dir string
	addr     string
	log      *syncBuffer

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Start builds (once) and starts versitygw on a free loopback port, its
// objects under dir, with the buckets named created. Stop it with Close.
func Start(ctx context.Context, dir string, progress io.Writer, buckets ...string) (*Server, error) {
	bin, err := Build(ctx, progress)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"data", "meta"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &Server{Endpoint: "http://" + addr, bin: bin, dir: dir, addr: addr, log: &syncBuffer{}}
	if err := s.Restart(ctx); err != nil {
		return nil, err
	}
	for _, b := range buckets {
		if err := s.CreateBucket(ctx, b); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// CreateBucket creates a bucket as the root account, through the S3 API.
func (s *Server) CreateBucket(ctx context.Context, bucket string) error {
	c := s3.New(s3.Options{Region: Region, BaseEndpoint: aws.String(s.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, "")})
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		return fmt.Errorf("create bucket %s: %w", bucket, err)
	}
	return nil
}

// URL is the recording-store URL of bucket on this server.
func (s *Server) URL(bucket string) string {
	return "s3://" + bucket + "?endpoint=" + s.Endpoint + "&region=" + Region + "&use_path_style=true"
}

// Env is the AWS environment that gives a client the root account.
func Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + AccessKey, "AWS_SECRET_ACCESS_KEY=" + SecretKey, "AWS_REGION=" + Region,
		"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null"}
}

// Stop ends the server (an outage); Restart brings it back on the same
// port with the same objects.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.cmd = nil
}

// Restart starts the server (again) and waits until it answers.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	cmd := exec.Command(s.bin, "--access", AccessKey, "--secret", SecretKey, "--region", Region, "--port", s.addr,
		"posix", "--sidecar", filepath.Join(s.dir, "meta"), filepath.Join(s.dir, "data"))
	cmd.Stdout, cmd.Stderr = s.log, s.log
	cmd.Env = []string{"HOME=" + s.dir, "PATH=/usr/bin:/bin"}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start versitygw: %w", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Any HTTP answer (403 without a signature) means it serves.
		resp, err := http.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("versitygw did not answer on %s: %v\n%s", s.addr, err, s.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Objects lists the files the server keeps for bucket (their paths under
// the bucket), read from its POSIX root.
func (s *Server) Objects(bucket string) ([]string, error) {
	root := filepath.Join(s.dir, "data", bucket)
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != root {
			return filepath.SkipDir // the server's own (uploads in progress)
		}
		if d.Type().IsRegular() && !strings.HasPrefix(d.Name(), ".") {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	return out, err
}

// Path is the file in which the server keeps object key of bucket.
func (s *Server) Path(bucket, key string) string {
	return filepath.Join(s.dir, "data", bucket, filepath.FromSlash(key))
}

// Log is what the server printed.
func (s *Server) Log() string { return s.log.String() }

// syncBuffer is the server's output, written by its process's copiers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Close stops the server.
func (s *Server) Close() { s.Stop() }
