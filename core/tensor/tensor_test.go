package tensor_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"unsafe"

	"github.com/spdl-go/spdl-go/core/tensor"
	"github.com/spdl-go/spdl-go/core/tensor/internal/testhelp"
)

// noLeak fails t at its end if tensor blocks or buffers are still live.
func noLeak(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		if s := tensor.MemStats(); s.LiveTensors != 0 || s.LiveBytes != 0 {
			t.Errorf("leak: %+v", s)
		}
	})
}

func mustNew(t testing.TB, dt tensor.DType, shape ...int64) *tensor.Tensor {
	t.Helper()
	x, err := tensor.New(dt, shape...)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// float32s views a contiguous float32 tensor.
func float32s(x *tensor.Tensor) []float32 {
	return unsafe.Slice((*float32)(x.Data()), x.Numel())
}

// values returns x's elements as float64, in row-major order.
func values(t *testing.T, x *tensor.Tensor) []float64 {
	t.Helper()
	y, err := x.Convert(tensor.Float64)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Release()
	return slices.Clone(unsafe.Slice((*float64)(y.Data()), y.Numel()))
}

func TestNew(t *testing.T) {
	noLeak(t)
	for _, tc := range []struct {
		dt      tensor.DType
		shape   []int64
		strides []int64
		nbytes  int
		str     string
	}{
		{tensor.Float32, []int64{32, 3, 224, 224}, []int64{150528, 50176, 224, 1}, 32 * 3 * 224 * 224 * 4, "tensor(float32, [32 3 224 224])"},
		{tensor.UInt8, []int64{5}, []int64{1}, 5, "tensor(uint8, [5])"},
		{tensor.Int64, []int64{}, []int64{}, 8, "tensor(int64, [])"},
		{tensor.BFloat16, []int64{2, 0, 3}, []int64{3, 3, 1}, 0, "tensor(bfloat16, [2 0 3])"},
		{tensor.Bool, []int64{1, 7}, []int64{7, 1}, 7, "tensor(bool, [1 7])"},
	} {
		t.Run(tc.str, func(t *testing.T) {
			x := mustNew(t, tc.dt, tc.shape...)
			defer x.Release()
			if got := x.Shape(); !slices.Equal(got, tc.shape) {
				t.Errorf("Shape = %v, want %v", got, tc.shape)
			}
			if got := x.Strides(); !slices.Equal(got, tc.strides) {
				t.Errorf("Strides = %v, want %v", got, tc.strides)
			}
			if x.DType() != tc.dt || x.NBytes() != tc.nbytes || !x.Contiguous() || x.String() != tc.str {
				t.Errorf("got %v %d bytes contiguous=%v %q", x.DType(), x.NBytes(), x.Contiguous(), x.String())
			}
			if uintptr(x.Data())%64 != 0 {
				t.Errorf("data %p is not 64-byte aligned", x.Data())
			}
			if b := x.Bytes(); len(b) != tc.nbytes {
				t.Errorf("len(Bytes) = %d", len(b))
			}
			if x.ReadOnly() {
				t.Error("new tensor is read-only")
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dt    tensor.DType
		shape []int64
	}{
		{"negative", tensor.Float32, []int64{2, -1}},
		{"zero dtype", tensor.DType{}, []int64{2}},
		{"sub-byte", tensor.DType{Code: 2, Bits: 4, Lanes: 1}, []int64{2}},
		{"overflow", tensor.Float64, []int64{1 << 40, 1 << 30}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if x, err := tensor.New(tc.dt, tc.shape...); err == nil {
				x.Release()
				t.Fatal("New succeeded")
			}
		})
	}
}

func TestParseDType(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.Bool, tensor.Int8, tensor.Int16, tensor.Int32, tensor.Int64,
		tensor.UInt8, tensor.UInt16, tensor.UInt32, tensor.UInt64,
		tensor.Float16, tensor.BFloat16, tensor.Float32, tensor.Float64} {
		got, err := tensor.ParseDType(dt.String())
		if err != nil || got != dt {
			t.Errorf("ParseDType(%q) = %v, %v", dt.String(), got, err)
		}
	}
	if _, err := tensor.ParseDType("float"); err == nil {
		t.Error("ParseDType(float) succeeded")
	}
	if s := (tensor.DType{Code: 5, Bits: 64, Lanes: 1}).String(); s != "dtype(code=5, bits=64, lanes=1)" {
		t.Errorf("complex64 String = %q", s)
	}
}

func TestExport(t *testing.T) {
	for _, kind := range []string{"versioned", "legacy"} {
		t.Run(kind, func(t *testing.T) {
			noLeak(t)
			x := mustNew(t, tensor.Float32, 2, 3)
			copy(float32s(x), []float32{0, 1, 2, 3, 4, 5})
			var (
				p    unsafe.Pointer
				err  error
				v    testhelp.Versioned
				done func(unsafe.Pointer)
			)
			if kind == "versioned" {
				p, err = x.ToDLPackVersioned()
				v, done = testhelp.ReadVersioned(p), testhelp.CallVersionedDeleter
				if v.Major != 1 || v.Minor != 0 || v.Flags != 0 {
					t.Errorf("version %d.%d flags %d", v.Major, v.Minor, v.Flags)
				}
			} else {
				p, err = x.ToDLPackLegacy()
				v, done = testhelp.ReadLegacy(p), testhelp.CallLegacyDeleter
			}
			if err != nil {
				t.Fatal(err)
			}
			if v.Data != x.Data() || v.Device != 1 || v.ByteOffset != 0 || v.Code != 2 || v.Bits != 32 || v.Lanes != 1 ||
				!slices.Equal(v.Shape, []int64{2, 3}) || !slices.Equal(v.Strides, []int64{3, 1}) {
				t.Errorf("exported view %+v", v)
			}
			// The export keeps the data alive after Go lets go.
			x.Release()
			if s := tensor.MemStats(); s.LiveTensors != 1 || s.LiveBytes != 4096 {
				t.Errorf("after Release: %+v", s)
			}
			if got := unsafe.Slice((*float32)(v.Data), 6); got[5] != 5 {
				t.Errorf("data after Release: %v", got)
			}
			done(p)
		})
	}
}

func TestImport(t *testing.T) {
	for _, kind := range []string{"versioned", "legacy"} {
		t.Run(kind, func(t *testing.T) {
			noLeak(t)
			opts := testhelp.Opts{Shape: []int64{2, 3}, Offset: 4}
			var (
				f   *testhelp.Foreign
				x   *tensor.Tensor
				err error
			)
			if kind == "versioned" {
				f = testhelp.NewVersioned(opts)
				x, err = tensor.FromDLPackVersioned(f.Ptr)
			} else {
				f = testhelp.NewLegacy(opts)
				x, err = tensor.FromDLPackLegacy(f.Ptr)
			}
			defer f.Free()
			if err != nil {
				t.Fatal(err)
			}
			if got := values(t, x); !slices.Equal(got, []float64{0, 1, 2, 3, 4, 5}) {
				t.Errorf("values %v (byte_offset not applied?)", got)
			}
			if !slices.Equal(x.Strides(), []int64{3, 1}) || !x.Contiguous() || x.ReadOnly() {
				t.Errorf("strides %v contiguous %v read-only %v", x.Strides(), x.Contiguous(), x.ReadOnly())
			}
			y := x.Retain()
			x.Release()
			x.Release() // idempotent
			if f.Deleted() != 0 {
				t.Fatal("deleter ran while a reference was held")
			}
			// Re-export of an import: the foreign deleter waits for it too.
			p, err := y.ToDLPackVersioned()
			if err != nil {
				t.Fatal(err)
			}
			y.Release()
			if f.Deleted() != 0 {
				t.Fatal("deleter ran while an export was held")
			}
			testhelp.CallVersionedDeleter(p)
			if f.Deleted() != 1 {
				t.Fatalf("deleter ran %d times, want 1", f.Deleted())
			}
		})
	}
}

func TestImportReadOnlyStrided(t *testing.T) {
	noLeak(t)
	// A transposed view: shape (3, 2) strides (1, 3) over 0..5.
	f := testhelp.NewVersioned(testhelp.Opts{Shape: []int64{3, 2}, Strides: []int64{1, 3}, ReadOnly: true})
	defer f.Free()
	x, err := tensor.FromDLPackVersioned(f.Ptr)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	if !x.ReadOnly() || x.Contiguous() || x.Bytes() != nil {
		t.Errorf("read-only %v contiguous %v", x.ReadOnly(), x.Contiguous())
	}
	if got := values(t, x); !slices.Equal(got, []float64{0, 3, 1, 4, 2, 5}) {
		t.Errorf("values %v", got)
	}
	if err := x.Fill(1); err == nil {
		t.Error("Fill of a read-only tensor succeeded")
	}
	// Stacking a strided sample copies it in logical order.
	batch := mustNew(t, tensor.Float32, 2, 3, 2)
	defer batch.Release()
	for i := range int64(2) {
		if err := tensor.CopyInto(batch, []int64{i}, x); err != nil {
			t.Fatal(err)
		}
	}
	if got := values(t, batch); !slices.Equal(got, []float64{0, 3, 1, 4, 2, 5, 0, 3, 1, 4, 2, 5}) {
		t.Errorf("stacked %v", got)
	}
	if err := tensor.CopyInto(x, []int64{0}, batch); err == nil {
		t.Error("CopyInto a read-only tensor succeeded")
	}
	p, err := x.ToDLPackVersioned()
	if err != nil {
		t.Fatal(err)
	}
	if v := testhelp.ReadVersioned(p); v.Flags&1 == 0 {
		t.Errorf("export of read-only tensor has flags %d", v.Flags)
	}
	testhelp.CallVersionedDeleter(p)
}

func TestImportErrors(t *testing.T) {
	noLeak(t)
	for _, tc := range []struct {
		name string
		f    *testhelp.Foreign
		imp  func(unsafe.Pointer) (*tensor.Tensor, error)
		del  func(unsafe.Pointer)
	}{
		{"cuda versioned", testhelp.NewVersioned(testhelp.Opts{Shape: []int64{2}, Device: 2}), tensor.FromDLPackVersioned, testhelp.CallVersionedDeleter},
		{"major 2", testhelp.NewVersioned(testhelp.Opts{Shape: []int64{2}, Major: 2}), tensor.FromDLPackVersioned, testhelp.CallVersionedDeleter},
		{"cuda legacy", testhelp.NewLegacy(testhelp.Opts{Shape: []int64{2}, Device: 2}), tensor.FromDLPackLegacy, testhelp.CallLegacyDeleter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer tc.f.Free()
			if x, err := tc.imp(tc.f.Ptr); err == nil {
				x.Release()
				t.Fatal("import succeeded")
			} else {
				t.Log(err)
			}
			// A failed import leaves the struct to the caller.
			if tc.f.Deleted() != 0 {
				t.Fatal("failed import called the deleter")
			}
			tc.del(tc.f.Ptr)
		})
	}
	if _, err := tensor.FromDLPackVersioned(nil); err == nil {
		t.Error("nil versioned import succeeded")
	}
	if _, err := tensor.FromDLPackLegacy(nil); err == nil {
		t.Error("nil legacy import succeeded")
	}
}

func TestDetachAdopt(t *testing.T) {
	noLeak(t)
	x := mustNew(t, tensor.Int32, 4)
	p := x.Detach()
	if x.String() != "tensor(released)" {
		t.Errorf("detached String = %q", x.String())
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Shape of a detached tensor did not panic")
			}
		}()
		x.Shape()
	}()
	x.Release() // no-op: the reference went with Detach
	if s := tensor.MemStats(); s.LiveTensors != 1 {
		t.Fatalf("after Detach: %+v", s)
	}
	y := tensor.Adopt(p)
	if !slices.Equal(y.Shape(), []int64{4}) {
		t.Errorf("adopted shape %v", y.Shape())
	}
	y.Release()
	if tensor.Adopt(nil) != nil {
		t.Error("Adopt(nil) != nil")
	}
}

func TestPool(t *testing.T) {
	noLeak(t)
	tensor.Trim()
	t.Cleanup(func() { tensor.SetPoolLimit(256 << 20) })
	const n, class = 100000, 106496 // 100000 bytes round up to 64 KiB + 5 * 8 KiB

	t.Run("reuse", func(t *testing.T) {
		a := mustNew(t, tensor.UInt8, n)
		s := tensor.MemStats()
		if s.LiveBytes != class || s.PooledBytes != 0 {
			t.Fatalf("after alloc: %+v", s)
		}
		addr := a.Data()
		a.Release()
		if s := tensor.MemStats(); s.LiveBytes != 0 || s.PooledBytes != class {
			t.Fatalf("after release: %+v", s)
		}
		b := mustNew(t, tensor.UInt8, n+1000) // same class
		defer b.Release()
		if b.Data() != addr {
			t.Error("same-class allocation did not reuse the freed buffer")
		}
		if s2 := tensor.MemStats(); s2.SystemAllocs != s.SystemAllocs || s2.PooledBytes != 0 {
			t.Errorf("reuse allocated from the system: %+v then %+v", s, s2)
		}
	})

	t.Run("limit", func(t *testing.T) {
		tensor.SetPoolLimit(2*class - 1)
		var xs []*tensor.Tensor
		for range 3 {
			xs = append(xs, mustNew(t, tensor.UInt8, n))
		}
		for _, x := range xs {
			x.Release()
		}
		if s := tensor.MemStats(); s.PooledBytes != class {
			t.Errorf("pool holds %d bytes, want one buffer (%d) under a limit of %d", s.PooledBytes, class, 2*class-1)
		}
		tensor.SetPoolLimit(0)
		if s := tensor.MemStats(); s.PooledBytes != 0 {
			t.Errorf("limit 0 kept %d bytes", s.PooledBytes)
		}
		tensor.SetPoolLimit(256 << 20)
	})

	t.Run("trim", func(t *testing.T) {
		for _, size := range []int64{1, 5000, 70000, 1 << 20, 3 << 20} {
			mustNew(t, tensor.UInt8, size).Release()
		}
		if s := tensor.MemStats(); s.PooledBytes == 0 {
			t.Fatalf("nothing cached: %+v", s)
		}
		tensor.Trim()
		if s := tensor.MemStats(); s.PooledBytes != 0 {
			t.Errorf("Trim left %d bytes", s.PooledBytes)
		}
	})
}

func TestConcurrent(t *testing.T) {
	noLeak(t)
	var wg sync.WaitGroup
	exports := make(chan unsafe.Pointer, 64)
	var consumers sync.WaitGroup
	for range 4 { // consumers call deleters from other threads, as Python does
		consumers.Go(func() {
			for p := range exports {
				testhelp.CallVersionedDeleter(p)
			}
		})
	}
	for g := range 16 {
		wg.Go(func() {
			for i := range 500 {
				x, err := tensor.New(tensor.Float32, int64(1+(g*131+i*17)%5000))
				if err != nil {
					t.Error(err)
					return
				}
				y := x.Retain()
				p, err := y.ToDLPackVersioned()
				if err != nil {
					t.Error(err)
					return
				}
				exports <- p
				x.Release()
				y.Release()
			}
		})
	}
	wg.Wait()
	close(exports)
	consumers.Wait()
}

func TestConvert(t *testing.T) {
	noLeak(t)
	src := []float64{0, 1.5, -2.75, 65504, 1e-7, 300, -1, math.Inf(1)}
	x := mustNew(t, tensor.Float64, int64(len(src)))
	defer x.Release()
	copy(unsafe.Slice((*float64)(x.Data()), len(src)), src)
	inf := math.Inf(1)
	for _, tc := range []struct {
		dt   tensor.DType
		want []float64
	}{
		{tensor.Float32, []float64{0, 1.5, -2.75, 65504, float64(float32(1e-7)), 300, -1, inf}},
		{tensor.Float16, []float64{0, 1.5, -2.75, 65504, 1.1920928955078125e-07, 300, -1, inf}},
		{tensor.BFloat16, []float64{0, 1.5, -2.75, 65536, 1.0011717677116394e-07, 300, -1, inf}},
		{tensor.Int32, []float64{0, 1, -2, 65504, 0, 300, -1, math.MaxInt32}},
		{tensor.Int64, []float64{0, 1, -2, 65504, 0, 300, -1, math.MaxInt64}},
		{tensor.UInt8, []float64{0, 1, 0, 255, 0, 255, 0, 255}},
		{tensor.Bool, []float64{0, 1, 1, 1, 1, 1, 1, 1}},
	} {
		t.Run(tc.dt.String(), func(t *testing.T) {
			y, err := x.Convert(tc.dt)
			if err != nil {
				t.Fatal(err)
			}
			defer y.Release()
			if y.DType() != tc.dt {
				t.Errorf("dtype %v", y.DType())
			}
			if got := values(t, y); !slices.Equal(got, tc.want) {
				t.Errorf("got  %v\nwant %v", got, tc.want)
			}
		})
	}
	t.Run("int wraps", func(t *testing.T) {
		ints := mustNew(t, tensor.Int64, 4)
		defer ints.Release()
		copy(unsafe.Slice((*int64)(ints.Data()), 4), []int64{-1, 300, 1 << 40, math.MaxInt64})
		for dt, want := range map[tensor.DType][]float64{
			tensor.UInt8:   {255, 44, 0, 255},
			tensor.Int8:    {-1, 44, 0, -1},
			tensor.Float64: {-1, 300, 1 << 40, math.MaxInt64},
		} {
			y, err := ints.Convert(dt)
			if err != nil {
				t.Fatal(err)
			}
			if got := values(t, y); !slices.Equal(got, want) {
				t.Errorf("%v: got %v, want %v", dt, got, want)
			}
			y.Release()
		}
	})
	if _, err := x.Convert(tensor.DType{Code: 5, Bits: 64, Lanes: 1}); err == nil {
		t.Error("Convert to complex64 succeeded")
	}
}

func TestCopyIntoFill(t *testing.T) {
	noLeak(t)
	dst := mustNew(t, tensor.Int16, 2, 3, 4)
	defer dst.Release()
	if err := dst.Fill(-1); err != nil {
		t.Fatal(err)
	}
	src := mustNew(t, tensor.Float32, 2, 3)
	defer src.Release()
	copy(float32s(src), []float32{1, 2, 3, 4, 5, 6})
	if err := tensor.CopyInto(dst, []int64{1}, src); err != nil {
		t.Fatal(err)
	}
	want := []float64{
		-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
		1, 2, 3, -1, 4, 5, 6, -1, -1, -1, -1, -1,
	}
	if got := values(t, dst); !slices.Equal(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
	for _, tc := range []struct {
		name  string
		index []int64
		shape []int64
	}{
		{"index out of range", []int64{2}, []int64{3, 4}},
		{"too big", []int64{0}, []int64{3, 5}},
		{"ndim", []int64{0}, []int64{12}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := mustNew(t, tensor.Int16, tc.shape...)
			defer s.Release()
			if err := tensor.CopyInto(dst, tc.index, s); err == nil {
				t.Error("CopyInto succeeded")
			}
		})
	}
}

func ExampleNew() {
	x, err := tensor.New(tensor.Float32, 2, 3)
	if err != nil {
		panic(err)
	}
	defer x.Release()
	fmt.Println(x, x.Strides(), x.NBytes())
	// Output: tensor(float32, [2 3]) [3 1] 24
}

func BenchmarkNewRelease(b *testing.B) {
	b.ReportAllocs()
	mustNew(b, tensor.UInt8, 32*3*224*224).Release() // warm the pool
	for b.Loop() {
		mustNew(b, tensor.UInt8, 32*3*224*224).Release()
	}
}

func BenchmarkConvertUInt8Float32(b *testing.B) {
	x := mustNew(b, tensor.UInt8, 3, 224, 224)
	defer x.Release()
	b.SetBytes(int64(x.NBytes()))
	for b.Loop() {
		y, err := x.Convert(tensor.Float32)
		if err != nil {
			b.Fatal(err)
		}
		y.Release()
	}
}

// TestHalfRoundTrip converts every float16 and bfloat16 bit pattern to
// float32 and back, which must give the same bits (NaNs stay NaN).
func TestHalfRoundTrip(t *testing.T) {
	noLeak(t)
	for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16} {
		t.Run(dt.String(), func(t *testing.T) {
			h := mustNew(t, dt, 1<<16)
			defer h.Release()
			bits := unsafe.Slice((*uint16)(h.Data()), 1<<16)
			for i := range bits {
				bits[i] = uint16(i)
			}
			f, err := h.Convert(tensor.Float32)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Release()
			back, err := f.Convert(dt)
			if err != nil {
				t.Fatal(err)
			}
			defer back.Release()
			got := unsafe.Slice((*uint16)(back.Data()), 1<<16)
			expMask, mantMask := uint16(0x7c00), uint16(0x03ff)
			if dt == tensor.BFloat16 {
				expMask, mantMask = 0x7f80, 0x007f
			}
			for i, g := range got {
				isNaN := func(x uint16) bool { return x&expMask == expMask && x&mantMask != 0 }
				if isNaN(uint16(i)) {
					if !isNaN(g) {
						t.Errorf("NaN %#04x came back as %#04x", i, g)
					}
					continue
				}
				if g != uint16(i) {
					t.Errorf("%#04x came back as %#04x (via %v)", i, g, float32s(f)[i])
				}
			}
		})
	}
}

// Without a CUDA runtime installed (this test binary never installs one),
// pinned and device allocations fail with ErrNoCUDA and allocate nothing.
func TestCUDAAllocationsNeedARuntime(t *testing.T) {
	before := tensor.MemStats()
	for name, alloc := range map[string]func() (*tensor.Tensor, error){
		"pinned": func() (*tensor.Tensor, error) { return tensor.NewPinned(tensor.Float32, 4) },
		"device": func() (*tensor.Tensor, error) { return tensor.NewDevice(0, 0, tensor.Float32, 4) },
	} {
		x, err := alloc()
		if x != nil || !errors.Is(err, tensor.ErrNoCUDA) {
			t.Errorf("%s: got %v, %v; want ErrNoCUDA", name, x, err)
		}
	}
	if err := tensor.InstallCUDA(tensor.CUDAFuncs{}); err == nil {
		t.Errorf("InstallCUDA accepted missing function addresses")
	}
	if after := tensor.MemStats(); after.LiveTensors != before.LiveTensors {
		t.Errorf("failed allocations left tensors alive: %+v -> %+v", before, after)
	}
}
