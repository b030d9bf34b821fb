package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// playerCheck is a node script that parses a recording with the
// asciinema-player npm package's own asciicast loader (the function the
// player runs on a fetched .cast file) and prints what it understood.
const playerCheck = `
import { readFileSync } from "node:fs";
const { parseAsciicast } = await import(process.argv[2]);
const text = readFileSync(process.argv[3], "utf8");
const rec = await parseAsciicast(new Response(text));
const events = rec.events.toArray();
let out = "", resizes = [], exit = null, last = -1;
for (const [t, code, data] of events) {
  if (!(t >= last)) throw new Error("time goes backwards at " + t);
  last = t;
  if (code === "o") out += data;
  else if (code === "r") resizes.push(data);
  else if (code === "x") exit = data;
  else if (code === "i") throw new Error("input event in a Limen recording");
}
console.log(JSON.stringify({ cols: rec.cols, rows: rec.rows, events: events.length, output: out, resizes, exit }));
`

var player struct {
	once   sync.Once
	module string // the patched loader module
	err    error
}

// asciinemaPlayer installs the asciinema-player npm package once per test
// binary and returns a module that exports its asciicast loader. It fails
// when node or npm is missing: .ci/run installs them.
func asciinemaPlayer(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: recordings cannot be checked with asciinema-player (install nodejs and npm)", tool)
		}
	}
	player.once.Do(func() {
		dir, err := os.MkdirTemp("", "limen-asciinema-")
		if err != nil {
			player.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--prefix", dir, "asciinema-player@3")
		if out, err := cmd.CombinedOutput(); err != nil {
			player.err = err
			player.module = string(out)
			return
		}
		// The loader is internal to the package's core chunk: re-export it
		// from a copy next to the original so its relative imports resolve.
		dist := filepath.Join(dir, "node_modules", "asciinema-player", "dist")
		cores, _ := filepath.Glob(filepath.Join(dist, "core-*.js"))
		if len(cores) != 1 {
			player.err = os.ErrNotExist
			return
		}
		src, err := os.ReadFile(cores[0])
		if err != nil || !bytes.Contains(src, []byte("async function parse$2(data)")) {
			player.err = err
			player.module = "asciinema-player's asciicast loader (parse$2) not found in " + cores[0]
			return
		}
		player.module = filepath.Join(dist, "limen-check.mjs")
		player.err = os.WriteFile(player.module, append(src, "\nexport { parse$2 as parseAsciicast };\n"...), 0o644)
	})
	if player.err != nil {
		t.Fatalf("install asciinema-player: %v %s", player.err, player.module)
	}
	return player.module
}

// playerView is what asciinema-player understood of a recording.
type playerView struct {
	Cols, Rows int
	Events     int
	Output     string
	Resizes    []string
	Exit       *string
}

// validateCast parses rec with asciinema-player and checks it agrees with
// our own reader.
func validateCast(t *testing.T, rec []byte) playerView {
	t.Helper()
	module := asciinemaPlayer(t)
	dir := t.TempDir()
	castFile, script := filepath.Join(dir, "rec.cast"), filepath.Join(dir, "check.mjs")
	if err := os.WriteFile(castFile, rec, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, []byte(playerCheck), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("node", script, "file://"+module, castFile).CombinedOutput()
	if err != nil {
		t.Fatalf("asciinema-player refused the recording: %v\n%s\nrecording:\n%s", err, out, rec)
	}
	var v playerView
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("player check output %q: %v", out, err)
	}
	hdr, evs := castEvents(t, rec)
	if v.Cols != hdr.Term.Cols || v.Rows != hdr.Term.Rows || v.Events != len(evs) || v.Output != castOutput(evs) {
		t.Fatalf("asciinema-player read %dx%d, %d events, output %q; our reader %dx%d, %d events, output %q",
			v.Cols, v.Rows, v.Events, v.Output, hdr.Term.Cols, hdr.Term.Rows, len(evs), castOutput(evs))
	}
	t.Logf("asciinema-player %s: %dx%d, %d events, resizes %v, exit %v", strings.TrimSuffix(filepath.Base(module), ".mjs"), v.Cols, v.Rows, v.Events, v.Resizes, deref(v.Exit))
	return v
}

func deref(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}
