package recording

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestAppendJSONString(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", `""`},
		{"plain text in one run", "hello, world 0123456789", `"hello, world 0123456789"`},
		{"short escapes", "a\"b\\c\nd\re\tf\bg\fh", `"a\"b\\c\nd\re\tf\bg\fh"`},
		{"other controls", "\x00\x01\x1b[0m\x1f", `"\u0000\u0001\u001b[0m\u001f"`},
		{"DEL is not escaped", "\x7f", "\"\x7f\""},
		{"UTF-8 as is", "café € 😀 \u2028", "\"café € 😀 \u2028\""},
		{"U+FFFD in the output stays", "\uFFFD", "\"\uFFFD\""},
		{"invalid bytes become raw U+FFFD", "a\xffb\x80\xc0\xaf", "\"a\uFFFDb\uFFFD\uFFFD\uFFFD\""},
		{"truncated and surrogate sequences", "\xe2\x82!\xed\xa0\x80", "\"\uFFFD\uFFFD!\uFFFD\uFFFD\uFFFD\""},
		{"a quote past a plain word", "01234567\"", `"01234567\""`},
		{"a control inside a word", "0123\x004567", `"0123\u00004567"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(appendJSONString(nil, []byte(tc.in))); got != tc.want {
				t.Errorf("appendJSONString(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestPlainWord checks the 8-byte test against the byte table for every
// byte value at every position, next to plain bytes and next to each kind
// of byte that breaks a run (the borrows of the subtractions cross bytes).
func TestPlainWord(t *testing.T) {
	for _, fill := range []byte{'a', ' ', '~', 0x7f, 0x00, '"', 0x80} {
		for pos := range 8 {
			for c := range 256 {
				var w [8]byte
				for i := range w {
					w[i] = 'x'
				}
				w[(pos+3)%8] = fill
				w[pos] = byte(c)
				want := true
				for _, b := range w {
					want = want && plain[b]
				}
				if got := plainWord(binary.LittleEndian.Uint64(w[:])); got != want {
					t.Fatalf("plainWord(%q) = %v, want %v", w, got, want)
				}
			}
		}
	}
}

// TestValidSequence agrees with unicode/utf8 on every lead byte that may
// start a sequence, every second byte, and continuation bytes at the ends
// of their range and outside it, whole and cut short.
func TestValidSequence(t *testing.T) {
	edges := []byte{0x80, 0xBF, 0x41, 0xC0}
	for c := 0xC2; c <= 0xF4; c++ {
		for b1 := range 256 {
			for _, b2 := range edges {
				for _, b3 := range edges {
					full := []byte{byte(c), byte(b1), b2, b3}
					for n := 1; n <= 4; n++ {
						s := full[:n]
						want := 0
						if r, size := utf8.DecodeRune(s); r != utf8.RuneError || size != 1 {
							want = size
						}
						if got := validSequence(s); got != want {
							t.Fatalf("validSequence(% x) = %d, want %d", s, got, want)
						}
					}
				}
			}
		}
	}
}

// FuzzAppendJSONString: the encoder's output is valid JSON in valid UTF-8,
// it decodes to the input with each invalid byte replaced by U+FFFD (so to
// the input itself when that is valid UTF-8), and it is never larger than
// the escapes can make it.
func FuzzAppendJSONString(f *testing.F) {
	f.Add([]byte("plain text, then \x1b[1mbold\x1b[0m\r\n"))
	f.Add([]byte("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xff\xfe \xed\xa0\x80 \xef\xbf\xbd"))
	f.Add([]byte("0123456\"89abcdef\\\x00\x7f\x80"))
	f.Fuzz(func(t *testing.T, data []byte) {
		out := appendJSONString([]byte("prefix"), data)
		if !bytes.HasPrefix(out, []byte("prefix")) {
			t.Fatalf("the bytes before the string were changed: %q", out)
		}
		out = out[len("prefix"):]
		if !utf8.Valid(out) || !json.Valid(out) {
			t.Fatalf("not a valid JSON string in UTF-8: %q", out)
		}
		var s string
		if err := json.Unmarshal(out, &s); err != nil {
			t.Fatal(err)
		}
		if want := replaceInvalid(data); s != want {
			t.Fatalf("decodes to %q, want %q", s, want)
		}
		if utf8.Valid(data) && s != string(data) {
			t.Fatalf("valid UTF-8 %q came back as %q", data, s)
		}
		if len(out) > 2+6*len(data) {
			t.Fatalf("%d bytes for %d bytes of output", len(out), len(data))
		}
	})
}
