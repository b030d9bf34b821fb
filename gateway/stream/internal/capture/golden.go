package capture

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Golden loads the session saved as testdata/name.{proto,client,server}. When
// capt is not nil it first records a new session with it and saves it.
func Golden(t testing.TB, name string, capt func(context.Context) (Session, error)) Session {
	t.Helper()
	base := filepath.Join("testdata", name)
	if capt != nil {
		s, err := capt(context.Background())
		if err != nil {
			t.Fatalf("capture %s: %v", name, err)
		}
		for ext, b := range map[string][]byte{".proto": []byte(s.Protocol + "\n"), ".client": s.Client, ".server": s.Server} {
			if err := os.WriteFile(base+ext, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	var s Session
	for ext, dst := range map[string]*[]byte{".client": &s.Client, ".server": &s.Server} {
		b, err := os.ReadFile(base + ext)
		if err != nil {
			t.Fatalf("%v (run go test -run TestGolden -update)", err)
		}
		*dst = b
	}
	p, err := os.ReadFile(base + ".proto")
	if err != nil {
		t.Fatal(err)
	}
	s.Protocol = strings.TrimSpace(string(p))
	return s
}

// CheckEvents compares a decoded event log with testdata/name.events,
// rewriting that file first when update is set.
func CheckEvents(t testing.TB, name, got string, update bool) {
	t.Helper()
	path := filepath.Join("testdata", name+".events")
	if update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("events differ from %s:\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// Feed writes b to w in pieces ending at each cut, then the rest.
func Feed(w interface{ Write([]byte) (int, error) }, b []byte, cuts []int) error {
	prev := 0
	for _, c := range append(cuts, len(b)) {
		if _, err := w.Write(b[prev:c]); err != nil {
			return err
		}
		prev = c
	}
	return nil
}

// Bytewise returns the cuts that feed n bytes one at a time.
func Bytewise(n int) []int {
	cuts := make([]int, 0, n)
	for i := 1; i < n; i++ {
		cuts = append(cuts, i)
	}
	return cuts
}

// EverySplit calls decode with the whole session, then with each direction cut
// at every offset, then byte at a time, and fails at the first log that
// differs from the whole-session one.
func EverySplit(t *testing.T, s Session, decode func(clientCuts, serverCuts []int) (string, error)) {
	t.Helper()
	want, err := decode(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k := 1; k < len(s.Client); k++ {
		if got, err := decode([]int{k}, nil); err != nil || got != want {
			t.Fatalf("client split at %d: err=%v\n%s", k, err, got)
		}
	}
	for k := 1; k < len(s.Server); k++ {
		if got, err := decode(nil, []int{k}); err != nil || got != want {
			t.Fatalf("server split at %d: err=%v\n%s", k, err, got)
		}
	}
	if got, err := decode(Bytewise(len(s.Client)), Bytewise(len(s.Server))); err != nil || got != want {
		t.Fatalf("byte at a time: err=%v\n%s", err, got)
	}
}
