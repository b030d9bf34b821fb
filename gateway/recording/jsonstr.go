package recording

import (
	"encoding/binary"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// replacement is U+FFFD in UTF-8: what a byte that is not valid UTF-8
// becomes, written as is (3 bytes) rather than escaped (6).
const replacement = "\uFFFD"

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

// appendJSONString appends s as a JSON string. It is the hot path of a
// recording (encoding/json is several times slower, mostly escaping HTML that
// a terminal recording does not need). Output is copied in whole runs: plain
// ASCII, looked at 8 bytes at a time, and valid UTF-8 go as they are; control
// characters, quote and backslash are escaped (\n, \r, \t, \b and \f in two
// bytes, the others as \u00XX); each byte that is not valid UTF-8 becomes
// U+FFFD, written as its 3 UTF-8 bytes. Decoded, the string is the output
// exactly when the output is valid UTF-8.
func appendJSONString(dst []byte, s []byte) []byte {
	dst = append(dst, '"')
	start, i := 0, 0
	for i < len(s) {
		for i+8 <= len(s) && plainWord(binary.LittleEndian.Uint64(s[i:])) {
			i += 8
		}
		if i == len(s) {
			break
		}
		c := s[i]
		switch {
		case plain[c]:
			i++
		case c < utf8.RuneSelf:
			dst = appendEscape(append(dst, s[start:i]...), c)
			i++
			start = i
		case c < 0xC2 || c > 0xF4:
			// A continuation byte alone, or a byte that never starts a
			// valid sequence (C0, C1, F5–FF).
			dst = append(append(dst, s[start:i]...), replacement...)
			i++
			start = i
		default:
			if r, size := utf8.DecodeRune(s[i:]); r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			dst = append(append(dst, s[start:i]...), replacement...)
			i++
			start = i
		}
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
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
