package columnar_test

import (
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/spdl-go/spdl-go/core/columnar"
	"github.com/spdl-go/spdl-go/core/internal/shmtest"
)

// lendable says whether b starts an arena buffer of the allocator (lending
// one byte of it, which the test process never gives back: harmless).
func lendable(b []byte) bool {
	var desc [64]byte
	return columnar.LendShared(unsafe.Pointer(unsafe.SliceData(b)), 1, desc[:]) > 0
}

// In a worker process (a shared arena), Arrow buffers of 4 KiB or more
// come from the arena and can be lent; smaller ones, and everything
// without an arena, from malloc. The arena part runs in a child test
// process (shmtest.InArena).
func TestAllocatorUsesTheSharedArena(t *testing.T) {
	big := columnar.Allocator.Allocate(8192)
	if lendable(big) {
		t.Fatal("no arena yet, but the buffer is lendable")
	}
	columnar.Allocator.Free(big)
	columnar.Allocator.AssertSize(t, 0)
	if shmtest.InArena(t, 8<<20) < 0 {
		return
	}
	a := columnar.Allocator
	cases := []struct {
		name   string
		make   func() []byte
		shared bool
	}{
		{"small", func() []byte { return a.Allocate(100) }, false},
		{"big", func() []byte { return a.Allocate(8192) }, true},
		{"small grown big", func() []byte { return a.Reallocate(10000, a.Allocate(100)) }, true},
		{"big shrunk", func() []byte { return a.Reallocate(5000, a.Allocate(8192)) }, true},
		{"big grown", func() []byte { return a.Reallocate(20000, a.Allocate(8192)) }, true},
	}
	for _, c := range cases {
		b := c.make()
		if got := lendable(b); got != c.shared {
			t.Errorf("%s: lendable %v, want %v", c.name, got, c.shared)
		}
		for i, x := range b {
			if x != 0 {
				t.Fatalf("%s: byte %d is %d, want zeroed memory", c.name, i, x)
			}
		}
		for i := range b {
			b[i] = 0xee // freed, then reused: must come back zeroed
		}
		a.Free(b)
	}
	a.AssertSize(t, 0)
	var desc [64]byte
	if n := columnar.LendShared(unsafe.Pointer(&desc[0]), 1, desc[:]); n != 0 {
		t.Errorf("lent a buffer that is not the allocator's: %d", n)
	}
	vals := make([]any, 2000)
	for i := range vals {
		vals[i] = int64(i)
	}
	arr, err := columnar.FromValues(vals)
	if err != nil {
		t.Fatal(err)
	}
	data := arr.Data().Buffers()[1].Bytes()
	if !lendable(data) || arr.(*array.Int64).Value(1999) != 1999 {
		t.Errorf("an int64 column of 16000 bytes is not in the arena (or wrong)")
	}
	if n := columnar.LendShared(unsafe.Pointer(unsafe.SliceData(data)), int64(len(data))+1, desc[:]); n != 0 {
		t.Errorf("lent past the buffer's end: %d", n)
	}
	arr.Release()
	a.AssertSize(t, 0)
}
