package tunnel

import (
	"bytes"
	"encoding/binary"
	"net"
	"slices"
	"testing"
)

// writeLog is a net.Conn that keeps each Write it is given.
type writeLog struct {
	net.Conn
	writes [][]byte
}

func (w *writeLog) Write(p []byte) (int, error) {
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

func header(typ byte, length uint32) []byte {
	h := make([]byte, yamuxHeaderSize)
	h[1] = typ
	binary.BigEndian.PutUint32(h[4:], 7)
	binary.BigEndian.PutUint32(h[8:], length)
	return h
}

// TestCoalescedConn: a data frame's header goes out with its body's start
// in one write; other headers pass through alone; every byte arrives once,
// in order.
func TestCoalescedConn(t *testing.T) {
	small := bytes.Repeat([]byte("s"), 100)
	large := bytes.Repeat([]byte("L"), 40<<10)
	tests := []struct {
		name   string
		writes [][]byte
		sizes  []int // the sizes of the writes the connection saw
	}{
		{"small data frame: one write", [][]byte{header(0, 100), small}, []int{112}},
		{"large data frame: a record's worth, then the rest", [][]byte{header(0, 40<<10), large}, []int{16 << 10, 40<<10 - firstWrite}},
		{"window update passes through", [][]byte{header(1, 0)}, []int{12}},
		{"empty data frame (FIN) passes through", [][]byte{header(0, 0)}, []int{12}},
		{"ping, then a data frame", [][]byte{header(2, 0), header(0, 100), small}, []int{12, 112}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := &writeLog{}
			c := newCoalescedConn(log)
			var want []byte
			for _, w := range tt.writes {
				n, err := c.Write(w)
				if err != nil || n != len(w) {
					t.Fatalf("Write(%d bytes) = %d, %v", len(w), n, err)
				}
				want = append(want, w...)
			}
			var got []byte
			var sizes []int
			for _, w := range log.writes {
				got = append(got, w...)
				sizes = append(sizes, len(w))
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("bytes differ: got %d bytes, want %d", len(got), len(want))
			}
			if !slices.Equal(sizes, tt.sizes) {
				t.Errorf("write sizes = %v, want %v", sizes, tt.sizes)
			}
		})
	}
}
