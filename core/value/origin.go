package value

import (
	"sync"
	"unsafe"
	"weak"
)

// Origins: the file or object a []byte was read from, so that Describe
// names it. An op that reads bytes records their origin (read_file); when
// the bytes take the path's place in an item (a tuple), a decoder's error
// still names the file ("<1180 bytes of \"a.jpg\">").
//
// The table keeps the last maxOrigins records and holds the bytes only
// weakly: a record whose bytes were collected matches nothing, even if
// new bytes reuse the address.

const maxOrigins = 4096

type origin struct {
	p    weak.Pointer[byte]
	name string
}

var origins struct {
	mu   sync.Mutex
	m    map[uintptr]origin
	ring [maxOrigins]uintptr // keys in the order they were added
	next int
}

// SetOrigin records that b (Go memory) was read from name. Bytes are
// known by their array: an empty b is recorded only if it has capacity
// (empty slices without one share a single address).
func SetOrigin(b []byte, name string) {
	if cap(b) == 0 {
		return
	}
	p := unsafe.SliceData(b)
	k := uintptr(unsafe.Pointer(p))
	o := &origins
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = make(map[uintptr]origin, maxOrigins)
	}
	if e, ok := o.m[k]; ok && e.p.Value() == p {
		o.m[k] = origin{e.p, name} // the same bytes again (a cache hit)
		return
	}
	if old := o.ring[o.next]; old != 0 {
		delete(o.m, old)
	}
	o.ring[o.next] = k
	o.next = (o.next + 1) % maxOrigins
	o.m[k] = origin{weak.Make(p), name}
}

// Origin returns the name SetOrigin recorded for b, if b is those bytes
// (from their first byte) and the record is still kept.
func Origin(b []byte) (string, bool) {
	if cap(b) == 0 {
		return "", false
	}
	p := unsafe.SliceData(b)
	o := &origins
	o.mu.Lock()
	e, ok := o.m[uintptr(unsafe.Pointer(p))]
	o.mu.Unlock()
	if !ok || e.p.Value() != p {
		return "", false
	}
	return e.name, true
}
