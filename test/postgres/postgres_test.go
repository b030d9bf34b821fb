package postgres

import (
	"net"
	"strconv"
	"testing"
)

// TestStartStop starts a server, writes a row, restarts the server and
// reads the row back: the harness's Stop and Start keep the data.
func TestStartStop(t *testing.T) {
	s := Start(t)
	url := s.Database(t)
	if url == "" {
		t.Fatal("no database URL")
	}
	s.SQL(t, "postgres", "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)")
	s.Stop()
	if c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))); err == nil {
		c.Close()
		t.Fatal("the server still accepts connections after Stop")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if got := s.SQL(t, "postgres", "SELECT v FROM kept"); got != "42" {
		t.Fatalf("after a restart: got %q, want 42", got)
	}
}
