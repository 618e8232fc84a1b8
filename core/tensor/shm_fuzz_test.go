package tensor_test

import (
	"encoding/binary"
	"math/big"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/spdl-go/spdl-go/core/tensor"
)

// FuzzSharedDescriptor feeds corrupt descriptors, and corrupt buffer
// headers, to the parent's side of the arena: each is refused, or gives a
// view whose every byte lies in the mapping (read here, first and last).
func FuzzSharedDescriptor(f *testing.F) {
	const size = 1 << 16
	fd, err := unix.MemfdCreate("spdl-go-fuzz", unix.MFD_CLOEXEC)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { unix.Close(fd) })
	if err := unix.Ftruncate(fd, size); err != nil {
		f.Fatal(err)
	}
	m, err := tensor.MapShared(fd, size)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(m.Close)
	// The fuzzer writes the buffer headers through a mapping of its own.
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { unix.Munmap(mem) })

	desc := func(hdr, data int64, code, bits uint8, lanes uint16, shape, strides []int64) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(hdr))
		b = binary.LittleEndian.AppendUint64(b, uint64(data))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(shape)))
		b = append(b, code, bits)
		b = binary.LittleEndian.AppendUint16(b, lanes)
		for _, v := range append(append([]int64(nil), shape...), strides...) {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
		return b
	}
	capHdr := func(c int64) []byte { // a header whose capacity is c (offset 8; see shm_hdr)
		h := make([]byte, 64)
		binary.LittleEndian.PutUint64(h[8:], uint64(c))
		return h
	}
	f.Add(capHdr(1024), desc(0, 64, 1, 8, 1, []int64{32, 32}, []int64{32, 1}))
	f.Add(capHdr(1024), desc(0, 64+1023, 1, 8, 1, []int64{1024}, []int64{-1}))
	f.Add(capHdr(size), desc(0, 64, 2, 32, 1, []int64{1 << 40}, []int64{1 << 40}))
	f.Add(capHdr(-1), desc(0, 64, 1, 8, 1, nil, nil))
	f.Add(capHdr(100), desc(64, 128, 1, 8, 1, []int64{0, 5}, []int64{1 << 62, 3}))
	f.Fuzz(func(t *testing.T, hdr, d []byte) {
		copy(mem[:64], hdr)
		copy(mem[64:128], hdr)
		v, err := m.TensorFromDescriptor(d)
		if err != nil {
			return
		}
		defer v.Release()
		if v.Numel() == 0 {
			return
		}
		// Every reachable byte lies in the mapping: [data+lo, data+hi+item).
		data := big.NewInt(int64(binary.LittleEndian.Uint64(d[8:16])))
		lo, hi := new(big.Int), new(big.Int)
		item := big.NewInt(int64(v.DType().ItemSize()))
		for i, n := range v.Shape() {
			span := new(big.Int).Mul(big.NewInt(n-1), big.NewInt(v.Strides()[i]))
			span.Mul(span, item)
			if span.Sign() < 0 {
				lo.Add(lo, span)
			} else {
				hi.Add(hi, span)
			}
		}
		first := new(big.Int).Add(data, lo)
		end := new(big.Int).Add(new(big.Int).Add(data, hi), item)
		if first.Sign() < 0 || end.Cmp(big.NewInt(size)) > 0 {
			t.Fatalf("a view of bytes %v..%v of a %d-byte mapping was accepted", first, end, size)
		}
		_ = *(*byte)(unsafe.Add(v.Data(), lo.Int64()))
		_ = *(*byte)(unsafe.Add(v.Data(), hi.Int64()+item.Int64()-1))
	})
}
