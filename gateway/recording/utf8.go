package recording

import (
	"bytes"
	"unicode/utf8"
)

// utf8Buffer holds the tail of an output stream that may be the start of a
// UTF-8 sequence split across writes, so that a character cut by a frame
// boundary is recorded whole.
type utf8Buffer struct {
	held [utf8.UTFMax]byte
	n    int
	out  []byte
	// cr: the last byte recorded of this stream was '\r', so a '\n' that
	// begins the next write completes a "\r\n" (onlcr).
	cr   bool
	crlf []byte
}

// onlcr returns text with each '\n' that does not follow a '\r' written as
// "\r\n", as a terminal's line discipline writes it; what precedes text is
// the end of the previous call's text. The result is valid until the next
// call, and is text itself when text has no '\n'.
func (b *utf8Buffer) onlcr(text []byte) []byte {
	if len(text) == 0 {
		return text
	}
	i := bytes.IndexByte(text, '\n')
	if i < 0 {
		b.cr = text[len(text)-1] == '\r'
		return text
	}
	out, cr := b.crlf[:0], b.cr
	for i >= 0 {
		out = append(out, text[:i]...)
		if i > 0 {
			cr = text[i-1] == '\r'
		}
		if !cr {
			out = append(out, '\r')
		}
		out = append(out, '\n')
		cr = false
		text = text[i+1:]
		i = bytes.IndexByte(text, '\n')
	}
	if len(text) > 0 {
		out = append(out, text...)
		cr = text[len(text)-1] == '\r'
	}
	b.cr, b.crlf = cr, out
	return out
}

// take returns the bytes of held+p that are ready to record, holding back at
// most an incomplete trailing sequence (up to 3 bytes). The result is valid
// until the next call and may be p itself.
func (b *utf8Buffer) take(p []byte) []byte {
	if b.n == 0 {
		// Nothing held (the common case): p itself, without a copy.
		keep := incompleteTail(p)
		b.n = copy(b.held[:], p[len(p)-keep:])
		return p[:len(p)-keep]
	}
	b.out = append(append(b.out[:0], b.held[:b.n]...), p...)
	b.n = 0
	keep := incompleteTail(b.out)
	b.n = copy(b.held[:], b.out[len(b.out)-keep:])
	return b.out[:len(b.out)-keep]
}

// flush returns the held bytes (which appendJSONString replaces with U+FFFD).
func (b *utf8Buffer) flush() []byte {
	out := append(b.out[:0], b.held[:b.n]...)
	if b.n > 0 {
		b.cr = false // the stream's last byte is a held one
	}
	b.n = 0
	return out
}

// incompleteTail returns how many trailing bytes of p are a valid but
// incomplete UTF-8 sequence.
func incompleteTail(p []byte) int {
	for i := 1; i <= utf8.UTFMax-1 && i <= len(p); i++ {
		c := p[len(p)-i]
		if c < 0x80 {
			return 0 // ASCII: nothing pending
		}
		if c >= 0xC0 { // a leading byte
			tail := p[len(p)-i:]
			if !utf8.FullRune(tail) && validPrefix(tail) {
				return i
			}
			return 0
		}
	}
	return 0
}

// validPrefix reports whether p could still become a valid sequence.
func validPrefix(p []byte) bool {
	var buf [utf8.UTFMax]byte
	n := copy(buf[:], p)
	// Complete it with the smallest continuation bytes and check validity;
	// second-byte ranges (E0 A0.., F0 90.., ED ..9F, F4 ..8F) are covered by
	// trying both ends of the continuation range.
	for _, fill := range []byte{0x80, 0xBF} {
		for i := n; i < utf8.UTFMax; i++ {
			buf[i] = fill
		}
		if r, size := utf8.DecodeRune(buf[:]); r != utf8.RuneError && size > n {
			return true
		}
	}
	return false
}
