package bench

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeSinkAnswersAfterAllBytes: the upload figure's server confirms
// only once it has read every byte it was told of.
func TestServeSinkAnswersAfterAllBytes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	done := make(chan error, 1)
	go func() { done <- ServeSink(ctx, addr) }()
	var conn net.Conn
	for deadline := time.Now().Add(5 * time.Second); ; {
		if conn, err = net.Dial("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rate, err := timedUpload(conn, 3<<20+17)
	if err != nil || rate <= 0 {
		t.Fatalf("timedUpload: %v MiB/s, %v", rate, err)
	}

	// A short upload gets no answer: the sink waits for the rest.
	short, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	if _, err := short.Write([]byte{0, 0, 0, 0, 0, 0, 0, 10, 1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	_ = short.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	var b [1]byte
	var ne net.Error
	if _, err := short.Read(b[:]); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("the sink answered a short upload (want a read timeout): %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestTimedSend: the exec input figure waits for "ready", sends, and needs
// "done"; a command that never says done is an error, not a rate.
func TestTimedSend(t *testing.T) {
	rate, err := timedSend(strings.NewReader("ready\ndone\n"), io.Discard, 1<<20)
	if err != nil || rate <= 0 {
		t.Fatalf("timedSend: %v, %v", rate, err)
	}
	if _, err := timedSend(strings.NewReader("ready\n"), io.Discard, 1<<20); err == nil {
		t.Fatal("timedSend without done: no error")
	}
	if _, err := timedSend(strings.NewReader("hello\n"), io.Discard, 1<<20); err == nil {
		t.Fatal("timedSend without ready: no error")
	}
}

// TestSameFile: kubectl cp's copy must match its source in size and bytes.
func TestSameFile(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := WriteRandomFile(src, 4096); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(src)
	flipped := append([]byte(nil), data...)
	flipped[100] ^= 1
	for _, tt := range []struct {
		name    string
		copy    []byte // nil: no copy at all
		wantErr string
	}{
		{"identical", data, ""},
		{"one bit flipped", flipped, "want 4096"},
		{"short", data[:4095], "holds 4095 bytes"},
		{"empty", []byte{}, "holds 0 bytes"},
		{"missing", nil, "the copy"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "copy")
			if tt.copy != nil {
				if err := os.WriteFile(dst, tt.copy, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err := sameFile(src, dst, 4096)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("sameFile: %v, want %q", err, tt.wantErr)
			}
		})
	}
}
