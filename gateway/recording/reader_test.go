package recording

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

const validHeader = `{"version":3,"term":{"cols":80,"rows":24}}` + "\n"

func TestReaderRejects(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", "empty recording"},
		{"v2 header", `{"version":2,"width":80,"height":24}` + "\n", "version 2"},
		{"no size", `{"version":3}` + "\n", "out of range"},
		{"header not json", "hello\n", "asciicast header"},
		{"event not an array", validHeader + `{"a":1}` + "\n", "line 2"},
		{"event of two", validHeader + `[1.0, "o"]` + "\n", "2 elements"},
		{"negative interval", validHeader + `[-1, "o", "x"]` + "\n", "out of range"},
		{"empty code", validHeader + `[1, "", "x"]` + "\n", "non-empty string"},
		{"data not a string", validHeader + `[1, "o", 5]` + "\n", "event data"},
		{"line too long", validHeader + `[1, "o", "` + strings.Repeat("a", MaxLine) + `"]` + "\n", "longer than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := readAll(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func readAll(r io.Reader) error {
	rd, err := NewReader(r)
	if err != nil {
		return err
	}
	for {
		if _, err := rd.Next(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

func TestReaderSkipsCommentsAndReadsLastLineWithoutNewline(t *testing.T) {
	in := validHeader + "# a comment\n\n[0.5, \"o\", \"hi\"]\n[1.25, \"m\", \"\"]"
	rd, err := NewReader(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var got []Event
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
	}
	want := []Event{{500 * time.Millisecond, "o", "hi"}, {1250 * time.Millisecond, "m", ""}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestPlay(t *testing.T) {
	in := validHeader + `[0.2, "o", "a"]` + "\n" + `[5, "r", "90x30"]` + "\n" + `[10, "o", "b"]` + "\n" + `[0, "x", "0"]` + "\n" + `[0, "o", "after exit"]` + "\n"
	var out bytes.Buffer
	start := time.Now()
	if err := Play(context.Background(), strings.NewReader(in), &out, 10, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if out.String() != "ab" {
		t.Errorf("played %q, want %q", out.String(), "ab")
	}
	// 0.2s/10 + 0.1s/10 (idle cap) + 0.1s/10 = 40ms; far below the 15s uncapped.
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("playback took %v; maxIdle or speed ignored", d)
	}
}

func TestPlayStopsOnCancel(t *testing.T) {
	in := validHeader + `[60, "o", "never"]` + "\n"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	var out bytes.Buffer
	if err := Play(ctx, strings.NewReader(in), &out, 1, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the context's error", err)
	}
	if out.Len() != 0 {
		t.Errorf("wrote %q before its time", out.String())
	}
	if err := Play(context.Background(), strings.NewReader(in), &out, 0, 0); err == nil {
		t.Error("speed 0 accepted")
	}
}
