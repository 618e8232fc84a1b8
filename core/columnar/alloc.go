package columnar

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/memory/mallocator"

	"github.com/spdl-go/spdl-go/core/tensor"
)

// Allocator allocates every buffer this package builds, in C memory. In a
// worker process with a shared arena (spdl_go's pipelines in a
// subprocess), buffers of sharedMin bytes or more come from the arena, so
// that they reach the parent with no copy; the rest, and every buffer
// elsewhere, come from C malloc. Tests check for leaks with
// Allocator.AssertSize(t, 0).
var Allocator = &allocator{Mallocator: mallocator.NewMallocator(), shared: map[uintptr]int{}}

// sharedMin: smaller buffers are cheaper to copy than to carve (the arena
// rounds up to its size classes).
const sharedMin = 4096

type allocator struct {
	*mallocator.Mallocator
	mu          sync.Mutex
	shared      map[uintptr]int // arena buffers: start address -> bytes
	sharedBytes atomic.Int64
}

func start(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func (a *allocator) Allocate(size int) []byte {
	if size >= sharedMin {
		if b := tensor.SharedBuf(size); b != nil {
			b = b[:size:size] // as malloc'd ones: growing reallocates, so new bytes are zeroed
			a.mu.Lock()
			a.shared[start(b)] = size
			a.mu.Unlock()
			a.sharedBytes.Add(int64(size))
			return b
		}
	}
	return a.Mallocator.Allocate(size)
}

func (a *allocator) Reallocate(size int, b []byte) []byte {
	if n, ok := a.sharedLen(start(b)); ok && size <= n {
		a.mu.Lock()
		a.shared[start(b)] = size
		a.mu.Unlock()
		a.sharedBytes.Add(int64(size - n))
		return b[:size]
	} else if !ok && (size <= cap(b) || size < sharedMin) {
		return a.Mallocator.Reallocate(size, b)
	}
	nb := a.Allocate(size)
	copy(nb, b)
	a.Free(b)
	return nb
}

func (a *allocator) Free(b []byte) {
	p := start(b)
	a.mu.Lock()
	n, ok := a.shared[p]
	delete(a.shared, p)
	a.mu.Unlock()
	if !ok {
		a.Mallocator.Free(b)
		return
	}
	a.sharedBytes.Add(int64(-n))
	tensor.FreeSharedBuf(b)
}

func (a *allocator) sharedLen(p uintptr) (int, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, ok := a.shared[p]
	return n, ok
}

// AllocatedBytes counts the bytes of live buffers, from malloc and from
// the arena.
func (a *allocator) AllocatedBytes() int64 {
	return a.Mallocator.AllocatedBytes() + a.sharedBytes.Load()
}

// AssertSize fails t unless AllocatedBytes is sz.
func (a *allocator) AssertSize(t mallocator.TestingT, sz int) {
	if cur := a.AllocatedBytes(); cur != int64(sz) {
		t.Helper()
		t.Errorf("invalid memory size exp=%d, got=%d", sz, cur)
	}
}

// LendShared lends the first n bytes of the arena buffer that starts at p
// (a live buffer of this allocator) to the parent process, writing the
// descriptor of a 1-D uint8 tensor over them to out (see
// tensor.LendSharedBuf); its length, or 0 when p starts no arena buffer of
// this allocator or n is past its end (nothing is lent then).
func LendShared(p unsafe.Pointer, n int64, out []byte) int {
	size, ok := Allocator.sharedLen(uintptr(p))
	if !ok || n < 0 || n > int64(size) {
		return 0
	}
	return tensor.LendSharedBuf(p, n, out)
}
