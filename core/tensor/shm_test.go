package tensor_test

import (
	"testing"
	"unsafe"

	"github.com/spdl-go/spdl-go/core/internal/shmtest"
	"github.com/spdl-go/spdl-go/core/tensor"
)

// The arena is process-wide and set once: its tests run in a child test
// process (shmtest.InArena), so that the others keep the plain pool.
func TestSharedArena(t *testing.T) {
	const size = 8 << 20
	fd := shmtest.InArena(t, size)
	if fd < 0 {
		return
	}
	if err := tensor.UseSharedArena(fd, size); err == nil {
		t.Error("a second arena was accepted")
	}
	// The "parent": a second mapping of the same memory, as another
	// process has.
	m, err := tensor.MapShared(fd, size)
	if err != nil {
		t.Fatal(err)
	}

	// Lent, released by the child, then by the parent: only then reused.
	x := mustNew(t, tensor.UInt8, 1000, 1000)
	*(*byte)(x.Data()) = 42
	hdr, data, ok := x.LendShared()
	if !ok {
		t.Fatal("a pooled tensor was not in the arena")
	}
	addr := x.Data()
	x.Release()
	if s := tensor.SharedStats(); s.Pending != 1 || s.Lends != 1 {
		t.Errorf("after the child's release: %+v", s)
	}
	y := mustNew(t, tensor.UInt8, 1000, 1000)
	if y.Data() == addr {
		t.Error("a lent buffer was reused while the parent held it")
	}
	y.Release()
	p, err := m.Tensor(hdr, data, tensor.UInt8, []int64{1000, 1000}, []int64{1000, 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := *(*byte)(p.Data()); got != 42 {
		t.Errorf("the parent reads %d, want 42", got)
	}
	p.Release()
	z := mustNew(t, tensor.UInt8, 1000, 1000)
	if z.Data() != addr {
		t.Error("a buffer the parent gave back was not reused")
	}
	if s := tensor.SharedStats(); s.Pending != 0 {
		t.Errorf("after the parent's release: %+v", s)
	}

	// Views the parent must refuse: each reaches outside the buffer.
	hdr, data, _ = z.LendShared()
	u8 := tensor.UInt8
	for _, tc := range []struct {
		name          string
		hdr, data     int64
		shape, stride []int64
	}{
		{"negative header", -64, data, []int64{10}, []int64{1}},
		{"misaligned header", hdr + 8, data, []int64{10}, []int64{1}},
		{"header past the end", size, data, []int64{10}, []int64{1}},
		{"data before the buffer", hdr, hdr, []int64{10}, []int64{1}},
		{"too long", hdr, data, []int64{2000, 1000}, []int64{1000, 1}},
		{"stride past the end", hdr, data, []int64{2, 10}, []int64{1 << 40, 1}},
		{"negative stride before the start", hdr, data, []int64{10}, []int64{-1}},
		{"overflowing shape", hdr, data, []int64{1 << 62, 1 << 62}, []int64{1, 1}},
	} {
		if v, err := m.Tensor(tc.hdr, tc.data, u8, tc.shape, tc.stride); err == nil {
			v.Release()
			t.Errorf("%s: accepted", tc.name)
		}
	}
	// A reversed view within the buffer is fine.
	v, err := m.Tensor(hdr, data+9, u8, []int64{10}, []int64{-1})
	if err != nil {
		t.Errorf("a reversed view: %v", err)
	} else {
		v.Release()
	}
	z.Release()

	// A descriptor carries the same view in one message; a damaged one is
	// refused.
	d := mustNew(t, tensor.Int16, 3, 5)
	*(*int16)(d.Data()) = -7
	desc, ok := d.LendDescriptor()
	if !ok || len(desc) != 24+16*2 {
		t.Fatalf("LendDescriptor: %d bytes, ok %v", len(desc), ok)
	}
	d.Release()
	dv, err := m.TensorFromDescriptor(desc)
	if err != nil {
		t.Fatal(err)
	}
	if got := *(*int16)(dv.Data()); got != -7 || dv.DType() != tensor.Int16 || len(dv.Shape()) != 2 || dv.Shape()[1] != 5 {
		t.Errorf("through the descriptor: %d, %v %v", got, dv.DType(), dv.Shape())
	}
	dv.Release()
	for _, tc := range []struct {
		name string
		edit func([]byte) []byte
	}{
		{"short", func(b []byte) []byte { return b[:23] }},
		{"a dimension missing", func(b []byte) []byte { return b[:len(b)-8] }},
		{"ndim too large", func(b []byte) []byte { b[16] = 3; return b }},
		{"negative ndim", func(b []byte) []byte { b[19] = 0x80; return b }},
		{"huge stride", func(b []byte) []byte { b[len(b)-1] = 0x40; return b }},
		{"data offset past the end", func(b []byte) []byte { b[14] = 0x7f; return b }},
		{"zero bits", func(b []byte) []byte { b[21] = 0; return b }},
	} {
		bad := tc.edit(append([]byte(nil), desc...))
		if v, err := m.TensorFromDescriptor(bad); err == nil {
			v.Release()
			t.Errorf("%s: accepted", tc.name)
		}
	}

	// The mapping outlives its handle while a tensor uses it.
	w := mustNew(t, tensor.Float32, 256)
	hdr, data, _ = w.LendShared()
	*(*float32)(w.Data()) = 1.5
	w.Release()
	held, err := m.Tensor(hdr, data, tensor.Float32, []int64{256}, []int64{1})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	if got := *(*float32)(unsafe.Pointer(held.Data())); got != 1.5 {
		t.Errorf("after Close the parent reads %v", got)
	}
	held.Release()

	// A full arena falls back to malloc; those buffers are not lent.
	big := mustNew(t, tensor.UInt8, 16<<20)
	if _, _, ok := big.LendShared(); ok {
		t.Error("a buffer larger than the arena was lent")
	}
	big.Release()
	if s := tensor.SharedStats(); s.Misses == 0 || s.Size != size {
		t.Errorf("stats: %+v", s)
	}
}
