package recording_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/stream"
	"github.com/limenhq/limen/gateway/stream/ws"
)

// TestRecordCapturedSession decodes a real kubectl-shaped v5 tty exec (the ws
// package's golden capture: stdin "secret-stdin-text\n", resize 100x40) into
// a recording and reads it back.
func TestRecordCapturedSession(t *testing.T) {
	dir := filepath.Join("..", "stream", "ws", "testdata")
	read := func(ext string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, "exec-v5-tty"+ext))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var buf bytes.Buffer
	rec := recording.NewWriter(&buf, recording.Meta{Cluster: "c", Session: "s", TTY: true})
	for _, side := range []struct {
		dir  stream.Direction
		data []byte
	}{{stream.ClientToServer, read(".client")}, {stream.ServerToClient, read(".server")}} {
		d, err := ws.NewDecoder(ws.Config{Mode: ws.ModeChannelV5, Direction: side.dir, Handler: rec})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Write(side.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := rec.Finish(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "secret-stdin-text") {
		t.Fatalf("stdin was recorded:\n%s", buf.String())
	}
	rd, err := recording.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if rd.Header.Term.Cols != 100 || rd.Header.Term.Rows != 40 {
		t.Errorf("header term %+v, want the first resize", rd.Header.Term)
	}
	var out, codes strings.Builder
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		codes.WriteString(ev.Code)
		if ev.Code == "o" {
			out.WriteString(ev.Data)
		}
		if ev.Code == "x" && ev.Data != "0" {
			t.Errorf("exit %q, want 0", ev.Data)
		}
	}
	if want := "size 100x40\r\nhello from stdout\ncafé\n"; out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}
	if !strings.HasSuffix(codes.String(), "x") {
		t.Errorf("event codes %q do not end with the exit", codes.String())
	}
}

// BenchmarkWriter reports the recording's throughput for 16 KiB outputs of
// a session with a terminal.
func BenchmarkWriter(b *testing.B) { benchmarkWriter(b, true) }

// BenchmarkWriterNoTTY is BenchmarkWriter without a terminal: each line
// feed is recorded as "\r\n".
func BenchmarkWriterNoTTY(b *testing.B) { benchmarkWriter(b, false) }

func benchmarkWriter(b *testing.B, tty bool) {
	chunk := bytes.Repeat([]byte("0123456789abcdé\n"), 1<<10)
	w := recording.NewWriter(io.Discard, recording.Meta{TTY: tty})
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		if err := w.Stdout(chunk); err != nil {
			b.Fatal(err)
		}
	}
}
