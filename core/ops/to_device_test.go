package ops_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"

	"github.com/spdl-go/spdl-go/core/cuda"
	"github.com/spdl-go/spdl-go/core/cuda/cudatest"
	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/tensor"
	"github.com/spdl-go/spdl-go/core/value"
)

// fakeCUDA installs the host-memory CUDA stand-in with devices GPUs and
// checks at the end that no pinned or device memory is left in use.
func fakeCUDA(t *testing.T, devices int) *cuda.Runtime {
	t.Helper()
	rt, err := cudatest.Runtime()
	if err != nil {
		t.Fatal(err)
	}
	tensor.TrimCUDA()
	cudatest.Reset(devices)
	noLeak(t)
	t.Cleanup(func() {
		if s := tensor.CUDAMemStats(); s.PinnedLiveBytes != 0 || s.DeviceLiveBytes != 0 {
			t.Errorf("CUDA memory still in use: %+v", s)
		}
		tensor.TrimCUDA()
	})
	return rt
}

// hostCopy reads a device tensor back through the runtime.
func hostCopy(t *testing.T, rt *cuda.Runtime, d *tensor.Tensor) *tensor.Tensor {
	t.Helper()
	h, err := tensor.New(d.DType(), d.Shape()...)
	if err != nil {
		t.Fatal(err)
	}
	s, err := rt.StreamCreate()
	if err != nil {
		t.Fatal(err)
	}
	defer rt.StreamDestroy(s)
	if err := rt.MemcpyAsync(uintptr(h.Data()), uintptr(d.Data()), d.NBytes(), cuda.DeviceToHost, s); err != nil {
		t.Fatal(err)
	}
	if err := rt.Synchronize(s); err != nil {
		t.Fatal(err)
	}
	return h
}

func sameBytes(a, b *tensor.Tensor) bool {
	x := unsafe.Slice((*byte)(a.Data()), a.NBytes())
	y := unsafe.Slice((*byte)(b.Data()), b.NBytes())
	return string(x) == string(y)
}

func TestToDeviceCopiesEveryTensor(t *testing.T) {
	for _, pinned := range []bool{true, false} {
		t.Run(map[bool]string{true: "pinned", false: "pageable"}[pinned], func(t *testing.T) {
			rt := fakeCUDA(t, 2)
			op := mustOp(t, "to_device", map[string]any{"device": int64(1), "pinned": pinned})
			img := newTensor(t, tensor.UInt8, []int64{2, 3, 4}, seq(0, 24)...)
			lbl := newTensor(t, tensor.Int64, []int64{2}, 7, 9)
			empty := newTensor(t, tensor.Float32, []int64{0, 5})
			want := []*tensor.Tensor{img.Retain(), lbl.Retain()}
			defer func() {
				for _, w := range want {
					w.Release()
				}
			}()
			batch := value.NewDict(3)
			batch.Set("image", img)
			batch.Set("meta", value.Tuple{lbl, "a path", int64(3)})
			batch.Set("empty", value.List{empty})
			out, err := op.Process(context.Background(), batch)
			if err != nil {
				t.Fatal(err)
			}
			defer value.Release(out)
			copies := cudatest.Count(cudatest.Copies)
			d := out.(*value.Dict)
			gotImg, _ := d.Get("image")
			meta, _ := d.Get("meta")
			emptyOut, _ := d.Get("empty")
			for i, g := range []*tensor.Tensor{gotImg.(*tensor.Tensor), meta.(value.Tuple)[0].(*tensor.Tensor)} {
				if dev := g.Device(); dev != (tensor.Device{Type: tensor.DeviceCUDA, ID: 1}) {
					t.Fatalf("output %d is on %v, want cuda:1", i, dev)
				}
				if g.Bytes() != nil {
					t.Errorf("Bytes() of a device tensor must be nil")
				}
				h := hostCopy(t, rt, g)
				if !sameBytes(h, want[i]) || h.DType() != want[i].DType() {
					t.Errorf("output %d: device copy differs from %v", i, want[i])
				}
				h.Release()
			}
			if m := meta.(value.Tuple); m[1] != "a path" || m[2] != int64(3) {
				t.Errorf("non-tensor leaves changed: %v", m[1:])
			}
			if e := emptyOut.(value.List)[0].(*tensor.Tensor); e.Device().Type != tensor.DeviceCUDA || e.Numel() != 0 {
				t.Errorf("empty tensor came out as %v on %v", e, e.Device())
			}
			if n := copies; n != 2 {
				t.Errorf("%d copies queued, want 2 (empty tensors need none)", n)
			}
			if s := tensor.CUDAMemStats(); s.PinnedLiveBytes != 0 {
				t.Errorf("staging buffers not released: %+v", s)
			}
			if pinned && cudatest.Count(cudatest.HostAllocs) == 0 {
				t.Errorf("pinned transfer allocated no pinned memory")
			}
			if !pinned && cudatest.Count(cudatest.HostAllocs) != 0 {
				t.Errorf("pageable transfer allocated pinned memory")
			}
		})
	}
}

// A released batch's device memory is reused; if a consumer named a stream,
// the reuse waits for the event recorded on it; a batch used on two streams
// goes back to CUDA instead.
func TestDeviceMemoryReuseFollowsConsumerStreams(t *testing.T) {
	cases := []struct {
		name       string
		streams    []uintptr
		failRecord bool
		reused     bool
		waits      int64
	}{
		{"never exported", nil, false, true, 0},
		{"one stream", []uintptr{77}, false, true, 1},
		{"same stream twice", []uintptr{1, 1}, false, true, 1},
		{"two streams", []uintptr{1, 2}, false, false, 0},
		{"record fails", []uintptr{77}, true, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fakeCUDA(t, 1)
			op := mustOp(t, "to_device", nil)
			first, err := op.Process(context.Background(), newTensor(t, tensor.Float32, []int64{64, 64}))
			if err != nil {
				t.Fatal(err)
			}
			ft := first.(*tensor.Tensor)
			addr := ft.Data()
			for _, s := range c.streams {
				ft.NoteStream(s)
			}
			if c.failRecord {
				cudatest.FailNext(cudatest.Records)
			}
			ft.Release()
			mallocs := cudatest.Count(cudatest.Mallocs)
			second, err := op.Process(context.Background(), newTensor(t, tensor.Float32, []int64{64, 64}))
			if err != nil {
				t.Fatal(err)
			}
			defer value.Release(second)
			if got := cudatest.Count(cudatest.Mallocs) == mallocs && second.(*tensor.Tensor).Data() == addr; got != c.reused {
				t.Errorf("reused = %v, want %v", got, c.reused)
			}
			if got := cudatest.Count(cudatest.Waits); got != c.waits {
				t.Errorf("stream waits = %d, want %d", got, c.waits)
			}
			if !c.reused && cudatest.Count(cudatest.Frees) != 1 {
				t.Errorf("a buffer not reused must go back to CUDA (frees = %d)", cudatest.Count(cudatest.Frees))
			}
		})
	}
}

func TestToDeviceFailuresNameTheTensorAndLeakNothing(t *testing.T) {
	cases := []struct {
		name string
		fail cudatest.Counter
		want string
	}{
		{"device alloc", cudatest.Mallocs, `["label"]: tensor(int64, [3]): tensor: cannot allocate 24 bytes of cuda:0 memory (cudaError 2)`},
		{"pinned alloc", cudatest.HostAllocs, `["label"]: tensor(int64, [3]): tensor: cannot allocate 24 bytes of pinned memory (cudaError 2)`},
		{"copy", cudatest.Copies, `["label"]: tensor(int64, [3]): cuda: cudaMemcpyAsync: invalid argument`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fakeCUDA(t, 1)
			op := mustOp(t, "to_device", nil)
			batch := value.NewDict(2)
			batch.Set("image", newTensor(t, tensor.UInt8, []int64{4}))
			batch.Set("label", newTensor(t, tensor.Int64, []int64{3}))
			// The image is already on the device (and is left as it is), so
			// the failing call is the label's.
			pre := mustOp(t, "to_device", nil)
			img, err := pre.Process(context.Background(), batch.Values[0])
			if err != nil {
				t.Fatal(err)
			}
			batch.Values[0] = img // already on the device: left as it is
			tensor.TrimCUDA()     // so that the label's buffers come from CUDA
			cudatest.FailNext(c.fail)
			_, err = op.Process(context.Background(), batch)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestToDeviceOptions(t *testing.T) {
	fakeCUDA(t, 1)
	for _, c := range []struct {
		opts map[string]any
		want string
	}{
		{map[string]any{"device": int64(-1)}, "want a CUDA device ordinal"},
		{map[string]any{"device": int64(3)}, "cuda:3 is not available: this machine has 1 CUDA device(s)"},
		{map[string]any{"runtime": "libcudart.so"}, "option runtime: want a list of paths"},
		{map[string]any{"stream": int64(1)}, `unknown option "stream"`},
		{map[string]any{"keep_on_cpu": value.List{-1.5}}, "option keep_on_cpu: want dict keys or indices"},
	} {
		if _, err := ops.New("to_device", c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(to_device, %v) = %v, want an error containing %q", c.opts, err, c.want)
		}
	}
	cudatest.Reset(0)
	if _, err := ops.New("to_device", nil); err == nil || !strings.Contains(err.Error(), "cuda:0 is not available: no usable CUDA device") {
		t.Errorf("with no GPU: %v", err)
	}
}

func TestToDeviceRejectsOtherGPUsAndCPUOpsRejectDeviceTensors(t *testing.T) {
	fakeCUDA(t, 2)
	on1, err := mustOp(t, "to_device", map[string]any{"device": int64(1)}).Process(context.Background(), newTensor(t, tensor.Float32, []int64{2}))
	if err != nil {
		t.Fatal(err)
	}
	d1 := on1.(*tensor.Tensor)
	_, err = mustOp(t, "to_device", nil).Process(context.Background(), value.List{d1.Retain()})
	if err == nil || !strings.Contains(err.Error(), "[0]: tensor(float32, [2]) is on cuda:1, not cuda:0") {
		t.Errorf("error %v", err)
	}
	// A device tensor reaching a CPU op fails its item instead of being read.
	_, err = mustOp(t, "to_tensor", map[string]any{"dtype": "float64"}).Process(context.Background(), d1.Retain())
	if err == nil || !strings.Contains(err.Error(), "on cuda:1") {
		t.Errorf("to_tensor on a device tensor: %v", err)
	}
	_, err = mustOp(t, "collate", nil).Process(context.Background(), value.List{d1})
	if err == nil || !strings.Contains(err.Error(), "on cuda:1") {
		t.Errorf("collate of device tensors: %v", err)
	}
}

func TestToDeviceKeepOnCPU(t *testing.T) {
	fakeCUDA(t, 1)
	op := mustOp(t, "to_device", map[string]any{"keep_on_cpu": value.List{"ids", int64(1)}})
	d := value.NewDict(2)
	d.Set("x", newTensor(t, tensor.Float32, []int64{2}))
	d.Set("ids", newTensor(t, tensor.Int64, []int64{2}))
	out, err := op.Process(context.Background(), value.Tuple{d, newTensor(t, tensor.Int64, []int64{2})})
	if err != nil {
		t.Fatal(err)
	}
	defer value.Release(out)
	tup := out.(value.Tuple)
	x, _ := tup[0].(*value.Dict).Get("x")
	ids, _ := tup[0].(*value.Dict).Get("ids")
	// keep_on_cpu names top-level entries: the tuple's element 1 stays, the
	// nested dict's "ids" moves.
	for _, c := range []struct {
		name string
		t    any
		cpu  bool
	}{{"[0][x]", x, false}, {"[0][ids]", ids, false}, {"[1]", tup[1], true}} {
		if got := c.t.(*tensor.Tensor).OnCPU(); got != c.cpu {
			t.Errorf("%s on CPU = %v, want %v", c.name, got, c.cpu)
		}
	}
	// Everything kept on the CPU: no CUDA call at all.
	before := cudatest.Count(cudatest.Syncs)
	out2, err := op.Process(context.Background(), value.Tuple{int64(1), newTensor(t, tensor.Int64, []int64{2})})
	if err != nil {
		t.Fatal(err)
	}
	value.Release(out2)
	if cudatest.Count(cudatest.Syncs) != before {
		t.Errorf("an item with nothing to copy touched the stream")
	}
}

// A pipeline that collates and copies batches with two transfer workers,
// over several epochs, with the consumer naming a stream for some batches:
// every batch arrives on the device with its data, device memory is pooled
// (allocations stay bounded) and nothing is left in use or running.
func TestToDeviceInPipeline(t *testing.T) {
	defer goleak.VerifyNone(t)
	rt := fakeCUDA(t, 1)
	toTensor := mustOp(t, "to_tensor", map[string]any{"dtype": "float32"})
	items := make([]any, 40)
	for i := range items {
		items[i] = value.List{float64(i), float64(i) + 0.5}
	}
	p, err := pipeline.New(pipeline.Config{
		Source: pipeline.Slice(items),
		Stages: []pipeline.StageConfig{
			{Kind: pipeline.KindPipe, Op: toTensor, Concurrency: 2, Order: pipeline.OrderInput},
			{Kind: pipeline.KindAggregate, Size: 4},
			{Kind: pipeline.KindPipe, Op: mustOp(t, "collate", nil)},
			{Kind: pipeline.KindPipe, Op: mustOp(t, "to_device", nil), Concurrency: 2, Order: pipeline.OrderInput},
		},
		BufferSize: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	for epoch := range 3 {
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		var got []float32
		for {
			b, err := p.Next(context.Background(), 10*time.Second)
			if errors.Is(err, pipeline.ErrEndOfData) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			d := b.(*tensor.Tensor)
			if d.Device().Type != tensor.DeviceCUDA {
				t.Fatalf("batch on %v", d.Device())
			}
			h := hostCopy(t, rt, d)
			got = append(got, unsafe.Slice((*float32)(h.Data()), h.Numel())...)
			h.Release()
			if len(got)%16 == 0 {
				d.NoteStream(uintptr(100 + epoch))
			}
			d.Release()
		}
		if len(got) != 80 || got[0] != 0 || got[79] != 39.5 {
			t.Fatalf("epoch %d: got %d values %v...", epoch, len(got), got[:min(4, len(got))])
		}
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	// 30 batches; in flight at most: 2 copying, 3 prefetched, 1 held.
	if n := cudatest.Count(cudatest.Mallocs); n > 8 {
		t.Errorf("%d device allocations for 30 batches: the pool is not reused", n)
	}
	if cudatest.Count(cudatest.Waits) == 0 {
		t.Errorf("no reuse waited for a consumer's stream")
	}
}
