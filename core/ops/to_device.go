package ops

import (
	"context"
	"fmt"
	"runtime"

	"github.com/spdl-go/spdl-go/core/cuda"
	"github.com/spdl-go/spdl-go/core/options"
	"github.com/spdl-go/spdl-go/core/tensor"
	"github.com/spdl-go/spdl-go/core/value"
)

func init() { Register("to_device", newToDevice) }

// toDevice copies every tensor in an item (a batch: a tensor, or dicts,
// tuples and lists holding tensors) to a CUDA device and passes the rest
// (Arrow columns, numbers, strings) through. The copies are queued on a
// non-blocking stream of the device's own and finished before the item
// moves on, so the consumer may use the tensors on any stream at once,
// while the next batches are copied in the pipeline's threads.
//
// Options: device (int, default 0), pinned (bool, default true: stage
// each tensor through a pooled pinned buffer, so the copy is a DMA that
// needs no CPU; false copies from pageable memory, which CUDA does
// synchronously through its own staging), keep_on_cpu (top-level dict
// keys or tuple/list indices whose values stay where they are, e.g. ids
// the loop reads on the CPU), runtime (list of paths tried first when the
// CUDA runtime is loaded; see core/cuda.Load).
//
// Device memory comes from a pool (tensor.NewDevice): a released batch's
// memory is reused only after the work its consumer queued on the stream
// it named in __dlpack__ has run.
type toDevice struct {
	rt       *cuda.Runtime
	device   int
	pinned   bool
	keepKeys map[string]bool // keep_on_cpu: dict keys
	keepIdx  map[int]bool    // keep_on_cpu: tuple/list indices
}

func newToDevice(m map[string]any) (Op, error) {
	o := options.New(m)
	device, err := o.Int("device", 0)
	if err != nil {
		return nil, err
	}
	pinned, err := o.Bool("pinned", true)
	if err != nil {
		return nil, err
	}
	var paths []string
	if v, ok := o.Get("runtime"); ok && v != nil {
		seq, ok := options.AsSeq(v)
		if !ok {
			return nil, fmt.Errorf("option runtime: want a list of paths, got %s", value.Describe(v))
		}
		for _, p := range seq {
			s, ok := p.(string)
			if !ok {
				return nil, fmt.Errorf("option runtime: want a list of paths, got an element %s", value.Describe(p))
			}
			paths = append(paths, s)
		}
	}
	keepKeys, keepIdx := map[string]bool{}, map[int]bool{}
	if v, ok := o.Get("keep_on_cpu"); ok && v != nil {
		seq, ok := options.AsSeq(v)
		if !ok {
			return nil, fmt.Errorf("option keep_on_cpu: want a list of keys or indices, got %s", value.Describe(v))
		}
		for _, e := range seq {
			if k, ok := e.(string); ok {
				keepKeys[k] = true
			} else if i, ok := options.AsInt(e); ok && i >= 0 {
				keepIdx[int(i)] = true
			} else {
				return nil, fmt.Errorf("option keep_on_cpu: want dict keys or indices >= 0, got %s", value.Describe(e))
			}
		}
	}
	if err := o.Done(); err != nil {
		return nil, err
	}
	if device < 0 {
		return nil, fmt.Errorf("option device: want a CUDA device ordinal (0, 1, ...), got %d", device)
	}
	rt, err := cuda.Use(paths...)
	if err != nil {
		return nil, err
	}
	n, err := rt.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("device cuda:%d is not available: %w", device, err)
	}
	if int(device) >= n {
		return nil, fmt.Errorf("device cuda:%d is not available: this machine has %d CUDA device(s)", device, n)
	}
	return toDevice{rt: rt, device: int(device), pinned: pinned, keepKeys: keepKeys, keepIdx: keepIdx}, nil
}

// transfer is one item's copies: what to release once the stream is done.
type transfer struct {
	op      toDevice
	stream  cuda.Stream
	release []*tensor.Tensor // CPU sources and staging copies, released after the sync
}

// Process replaces the item's CPU tensors with device copies in place: it
// owns the item, and everything else in it moves on untouched.
func (c toDevice) Process(ctx context.Context, in any) (any, error) {
	if err := ctx.Err(); err != nil {
		value.Release(in)
		return nil, err
	}
	if err := c.checkDevices(in, ""); err != nil {
		value.Release(in)
		return nil, err
	}
	if !c.hasCPUTensor(in, true) {
		return in, nil
	}
	// CUDA's current device is per OS thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.rt.SetDevice(c.device); err != nil {
		value.Release(in)
		return nil, fmt.Errorf("to_device: %w", err)
	}
	s, err := c.rt.BorrowStream(c.device)
	if err != nil {
		value.Release(in)
		return nil, fmt.Errorf("to_device: %w", err)
	}
	tr := &transfer{op: c, stream: s}
	out, err := tr.walk(in, "", true)
	// Whatever happened, the queued copies must finish before their
	// sources and destinations are released or reused.
	if serr := c.rt.Synchronize(s); serr != nil && err == nil {
		err = fmt.Errorf("to_device: %w", serr)
	}
	c.rt.ReturnStream(c.device, s)
	for _, t := range tr.release {
		t.Release()
	}
	if err != nil {
		value.Release(out) // device copies made so far and the CPU tensors not yet replaced
		return nil, err
	}
	return out, nil
}

// checkDevices fails an item holding a tensor on another GPU.
func (c toDevice) checkDevices(v any, path string) error {
	switch x := v.(type) {
	case *tensor.Tensor:
		if d := x.Device(); d.Type != tensor.DeviceCPU && d != (tensor.Device{Type: tensor.DeviceCUDA, ID: c.device}) {
			return fmt.Errorf("to_device: %s%v is on %v, not cuda:%d", at(path), x, d, c.device)
		}
	case *value.Dict:
		for i, k := range x.Keys {
			if err := c.checkDevices(x.Values[i], fmt.Sprintf("%s[%q]", path, k)); err != nil {
				return err
			}
		}
	case value.Tuple, value.List, []any:
		seq, _ := options.AsSeq(x)
		for i, e := range seq {
			if err := c.checkDevices(e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// walk replaces each CPU tensor in v with its device copy, in place. On
// error, v holds the copies made so far and the tensors not yet copied.
func (tr *transfer) walk(v any, path string, top bool) (any, error) {
	switch x := v.(type) {
	case *tensor.Tensor:
		if !x.OnCPU() {
			return x, nil
		}
		d, err := tr.copy(x, path)
		if err != nil {
			return x, err
		}
		tr.release = append(tr.release, x)
		return d, nil
	case *value.Dict:
		for i, k := range x.Keys {
			if top && tr.op.keepKeys[k] {
				continue
			}
			var err error
			if x.Values[i], err = tr.walk(x.Values[i], fmt.Sprintf("%s[%q]", path, k), false); err != nil {
				return x, err
			}
		}
	case value.Tuple, value.List, []any:
		seq, _ := options.AsSeq(x)
		for i := range seq {
			if top && tr.op.keepIdx[i] {
				continue
			}
			var err error
			if seq[i], err = tr.walk(seq[i], fmt.Sprintf("%s[%d]", path, i), false); err != nil {
				return x, err
			}
		}
	}
	return v, nil
}

// copy queues one tensor's copy to the device and returns the copy.
func (tr *transfer) copy(t *tensor.Tensor, path string) (*tensor.Tensor, error) {
	c := tr.op
	dst, err := tensor.NewDevice(c.device, uintptr(tr.stream), t.DType(), t.Shape()...)
	if err != nil {
		return nil, fmt.Errorf("to_device: %s%v: %w", at(path), t, err)
	}
	n := t.NBytes()
	if n == 0 {
		return dst, nil
	}
	src := t
	if c.pinned || !t.Contiguous() {
		var stage *tensor.Tensor
		if c.pinned {
			stage, err = tensor.NewPinned(t.DType(), t.Shape()...)
		} else {
			stage, err = tensor.New(t.DType(), t.Shape()...)
		}
		if err != nil {
			dst.Release()
			return nil, fmt.Errorf("to_device: %s%v: %w", at(path), t, err)
		}
		tr.release = append(tr.release, stage)
		if err := tensor.CopyInto(stage, nil, t); err != nil {
			dst.Release()
			return nil, fmt.Errorf("to_device: %s%w", at(path), err)
		}
		src = stage
	}
	if err := c.rt.MemcpyAsync(uintptr(dst.Data()), uintptr(src.Data()), n, cuda.HostToDevice, tr.stream); err != nil {
		// Nothing was queued into dst by this call; earlier copies went
		// to other buffers.
		dst.Release()
		return nil, fmt.Errorf("to_device: %s%v: %w", at(path), t, err)
	}
	return dst, nil
}

// hasCPUTensor reports whether v has a tensor to copy.
func (c toDevice) hasCPUTensor(v any, top bool) bool {
	switch x := v.(type) {
	case *tensor.Tensor:
		return x.OnCPU()
	case *value.Dict:
		for i, e := range x.Values {
			if !(top && c.keepKeys[x.Keys[i]]) && c.hasCPUTensor(e, false) {
				return true
			}
		}
	case value.Tuple, value.List, []any:
		seq, _ := options.AsSeq(x)
		for i, e := range seq {
			if !(top && c.keepIdx[i]) && c.hasCPUTensor(e, false) {
				return true
			}
		}
	}
	return false
}
