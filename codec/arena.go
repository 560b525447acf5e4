package codec

import "unsafe"

// arena holds the bytes of decoded strings and compacted JSON of one request.
// It only ever appends into a chunk's spare capacity, so strings already cut
// from a chunk never change; a full chunk is left to the strings that use it.
type arena struct{ buf []byte }

// reserve returns an empty slice with room for n bytes; fill it with append
// (never past n) and pass it to commit.
func (a *arena) reserve(n int) []byte {
	if cap(a.buf)-len(a.buf) < n {
		size := min(max(2*cap(a.buf), 512), 64<<10)
		a.buf = make([]byte, 0, max(size, n))
	}
	return a.buf[len(a.buf):len(a.buf)]
}

func (a *arena) commit(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	a.buf = a.buf[:len(a.buf)+len(b)]
	return unsafe.String(unsafe.SliceData(b), len(b))
}
