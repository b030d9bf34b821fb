package recording

import (
	"encoding/binary"
	"slices"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// replacement is U+FFFD in UTF-8: what a byte that is not valid UTF-8
// becomes, written as is (3 bytes) rather than escaped (6).
const replacement = "\uFFFD"

// appendJSONString appends s as a JSON string. It is the hot path of a
// recording (encoding/json is several times slower, mostly escaping HTML that
// a terminal recording does not need). Decoded, the string is s exactly when
// s is valid UTF-8:
//   - plain ASCII (printable, and DEL) is copied as is, whole runs at once,
//     found 8 bytes at a time;
//   - quote, backslash and control characters are escaped: \n, \r, \t, \b
//     and \f in two bytes, the others as \u00XX;
//   - valid UTF-8 sequences are copied as they are;
//   - each byte that is not valid UTF-8 becomes U+FFFD, as its 3 UTF-8 bytes.
//
// Between runs, bytes are written from a table (byteCodes), which costs no
// branch per byte that a mispredicted one would: random binary output is
// the case that needs it.
func appendJSONString(dst []byte, s []byte) []byte {
	dst = append(dst, '"')
	for len(s) > 0 {
		run := 0
		for run+8 <= len(s) && plainWord(binary.LittleEndian.Uint64(s[run:])) {
			run += 8
		}
		dst = append(dst, s[:run]...)
		s = s[run:]
		// Then byte by byte, for a stretch: short after a run (text is
		// mostly runs), longer when none was found (binary output).
		k := min(len(s), 8)
		if run == 0 {
			k = min(len(s), 64)
		}
		dst, s = appendBytes(dst, s, k)
	}
	return append(dst, '"')
}

// appendBytes appends the JSON text of s's first k bytes (and of the rest of
// a UTF-8 sequence begun among them) and returns the bytes not consumed.
func appendBytes(dst, s []byte, k int) ([]byte, []byte) {
	// Each byte takes at most 6, a sequence continued past k at most 3 more,
	// and a code is stored as 8 bytes (a sequence as 4).
	n := len(dst)
	dst = slices.Grow(dst, 6*k+3+8)
	buf := dst[:cap(dst)]
	i := 0
	for i < k {
		code := &byteCodes[s[i]]
		if code[7] != 0 {
			*(*[8]byte)(buf[n : n+8]) = *code
			n += int(code[7])
			i++
			continue
		}
		if size := validSequence(s[i:]); size > 0 {
			// At most 4 bytes: a store of 4 beats a call to copy.
			if len(s)-i >= 4 {
				*(*[4]byte)(buf[n : n+4]) = *(*[4]byte)(s[i : i+4])
			} else {
				copy(buf[n:], s[i:i+size])
			}
			n += size
			i += size
		} else {
			n += copy(buf[n:], replacement)
			i++
		}
	}
	return buf[:n], s[i:]
}

// byteCodes holds, for each byte outside a UTF-8 sequence, its JSON text in
// the first bytes and that text's length in the last; 0 marks the bytes
// that may start a valid sequence (0xC2–0xF4).
var byteCodes = func() (t [256][8]byte) {
	for c := range 256 {
		var text []byte
		switch {
		case plain[c]:
			text = []byte{byte(c)}
		case c < utf8.RuneSelf:
			text = appendEscape(nil, byte(c))
		case c < 0xC2 || c > 0xF4:
			// A continuation byte alone, or one that never starts a valid
			// sequence (C0, C1, F5–FF).
			text = []byte(replacement)
		default:
			continue
		}
		copy(t[c][:], text)
		t[c][7] = byte(len(text))
	}
	return t
}()

// validSequence returns the length of the valid UTF-8 sequence that starts
// s (whose first byte is in 0xC2–0xF4), or 0. The ranges of second bytes
// are the ones that keep out overlong forms, surrogates and code points
// past U+10FFFF (Unicode's table 3-7, as unicode/utf8 has it).
func validSequence(s []byte) int {
	l := leads[s[0]]
	n := int(l.n)
	if len(s) < n || s[1]-l.lo > l.hi-l.lo {
		return 0
	}
	if n > 2 && s[2]&0xC0 != 0x80 || n > 3 && s[3]&0xC0 != 0x80 {
		return 0
	}
	return n
}

// lead describes the sequences a lead byte starts: their length, and the
// range of their second byte.
type lead struct{ n, lo, hi byte }

var leads = func() (t [256]lead) {
	for c := 0xC2; c <= 0xF4; c++ {
		l := lead{n: 2, lo: 0x80, hi: 0xBF}
		switch {
		case c >= 0xF0:
			l.n = 4
		case c >= 0xE0:
			l.n = 3
		}
		switch c {
		case 0xE0:
			l.lo = 0xA0
		case 0xED:
			l.hi = 0x9F
		case 0xF0:
			l.lo = 0x90
		case 0xF4:
			l.hi = 0x8F
		}
		t[c] = l
	}
	return t
}()

// plain marks the bytes a JSON string holds as they are: printable ASCII
// (and DEL) but the quote and the backslash.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// Byte-parallel tests on 8 bytes at a time (see plainWord).
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plainWord reports whether all 8 bytes of x are plain. Each test sets a
// byte's high bit where that byte fails it: x itself for bytes ≥ 0x80;
// x-0x20 borrows into the high bit of a byte below 0x20 (exact for the
// question "is there one", bytes being < 0x80 when it matters); v-1 does the
// same for a zero byte of v, which x^'"' and x^'\\' have where x holds a
// quote or a backslash.
func plainWord(x uint64) bool {
	q, bs := x^('"'*ones), x^('\\'*ones)
	below := (x - 0x20*ones) &^ x
	quote := (q - ones) &^ q
	backslash := (bs - ones) &^ bs
	return (x|below|quote|backslash)&highs == 0
}

func appendEscape(dst []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(dst, '\\', c)
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
}
