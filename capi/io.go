package main

// The eager API (python/spdl_go/io.py): one call, one result, no pipeline.
// spdl_io_apply runs a registered op on one input (or on a list of inputs
// with a bounded goroutine pool, stacking the results), so the eager
// loaders take exactly the ops' options and fail with exactly their
// errors. spdl_io_load parses the formats of core/formats.
// spdl_io_encode_image writes JPEG (TurboJPEG) or PNG.

// #include <stdlib.h>
// #include "bridge.h"
import "C"

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sync/errgroup"

	"github.com/spdl-go/spdl-go/core/formats"
	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/options"
	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/tensor"
	"github.com/spdl-go/spdl-go/core/value"
)

// invalidError marks an error in the request itself (an option, a
// request field): the export returns SPDL_INVALID for it.
type invalidError struct{ err error }

func (e *invalidError) Error() string { return e.err.Error() }
func (e *invalidError) Unwrap() error { return e.err }

func invalid(err error) error { return &invalidError{err} }

// ioResult finishes an export: on success it hands v to the caller as a
// wire buffer in *out; on error it sets *errOut and returns SPDL_INVALID
// or SPDL_ERROR.
func ioResult(v any, err error, out *C.spdl_buf, errOut **C.char) C.int {
	if err == nil {
		var enc any
		if enc, err = handoff(v); err == nil {
			err = encodeOut(enc, out)
		}
	}
	if err != nil {
		setErr(errOut, err)
		if _, ok := errors.AsType[*invalidError](err); ok {
			return C.SPDL_INVALID
		}
		return C.SPDL_ERROR
	}
	return C.SPDL_OK
}

// borrowed views the caller's n bytes at p for the length of the call only.
func borrowed(p unsafe.Pointer, n C.size_t) []byte {
	if p == nil || n == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(p), int(n))
}

//export spdl_io_apply
func spdl_io_apply(req *C.spdl_cchar, reqLen C.size_t, in *C.spdl_cvoid, inLen C.size_t, out *C.spdl_buf, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	v, err := ioApply(C.GoBytes(unsafe.Pointer(req), C.int(reqLen)), borrowed(unsafe.Pointer(in), inLen))
	return ioResult(v, err, out, errOut)
}

// ioRequest is spdl_io_apply's request (see spdl.h).
type ioRequest struct {
	op      ops.Op
	opName  string
	batch   bool
	name    string   // names a bytes input in errors
	names   []string // batch: each input's name
	threads int
	strict  bool // batch: a failed item fails the call (else it is skipped)
}

func readIORequest(raw []byte) (*ioRequest, error) {
	var m map[string]any
	if err := decodeJSON(raw, &m); err != nil {
		return nil, invalid(fmt.Errorf("io: the request is not a JSON object: %w", err))
	}
	r := options.New(m)
	q := &ioRequest{}
	sub, err := r.Sub("op")
	if err != nil {
		return nil, invalid(fmt.Errorf("io: %w", err))
	}
	var opts map[string]any
	if sub != nil {
		if q.opName, err = sub.String("name", ""); err != nil {
			return nil, invalid(fmt.Errorf("io: op: %w", err))
		}
		if v, ok := sub.Get("options"); ok {
			if opts, ok = options.AsMap(v); !ok {
				return nil, invalid(fmt.Errorf("io: op %s: options must be a dict, not %s", q.opName, value.Describe(v)))
			}
		}
		if err := sub.Done(); err != nil {
			return nil, invalid(fmt.Errorf("io: op: %w", err))
		}
	}
	if q.opName == "" {
		return nil, invalid(errors.New("io: the request names no op"))
	}
	q.batch, err = r.Bool("batch", false)
	if err == nil {
		q.name, err = r.String("name", "")
	}
	if err == nil && r.Has("names") {
		q.names, err = r.Strings("names")
	}
	var threads int64
	if err == nil {
		threads, err = r.Int("threads", 0)
	}
	if err == nil {
		q.strict, err = r.Bool("strict", true)
	}
	if err == nil {
		err = r.Done()
	}
	if err != nil {
		return nil, invalid(fmt.Errorf("io: %w", err))
	}
	if threads < 0 {
		return nil, invalid(fmt.Errorf("io: threads must be >= 0 (0: one per CPU), got %d", threads))
	}
	q.threads = int(threads)
	if q.op, err = ops.New(q.opName, opts); err != nil {
		return nil, invalid(err) // ops.New names the op
	}
	return q, nil
}

func ioApply(raw, in []byte) (any, error) {
	q, err := readIORequest(raw)
	if err != nil {
		return nil, err
	}
	item, err := pyDecoder.Decode(in)
	if err != nil {
		return nil, invalid(fmt.Errorf("io: the input is not a wire value: %w", err))
	}
	if !q.batch {
		out, err := q.op.Process(context.Background(), item)
		if err != nil {
			return nil, nameError(err, sourceName(item, q.name))
		}
		return out, nil
	}
	items, ok := item.(value.List)
	if !ok {
		value.Release(item)
		return nil, invalid(fmt.Errorf("io: a batch request needs a list of inputs, got %s", value.Describe(item)))
	}
	if q.names != nil && len(q.names) != len(items) {
		value.Release(items)
		return nil, invalid(fmt.Errorf("io: %d names for %d inputs", len(q.names), len(items)))
	}
	names := make([]string, len(items))
	for i, it := range items {
		if q.names != nil {
			names[i] = q.names[i]
		}
		names[i] = sourceName(it, names[i])
	}
	return applyBatch(q.op, items, names, q.threads, q.strict)
}

// sourceName is what errors call an input: its path, the name the caller
// gave its bytes, or its size.
func sourceName(item any, name string) string {
	switch x := item.(type) {
	case string:
		return x
	case []byte:
		if name != "" {
			return name
		}
		return fmt.Sprintf("<%d bytes>", len(x))
	}
	if name != "" {
		return name
	}
	return value.Describe(item)
}

// nameError makes err name the input, unless the op's message already does.
func nameError(err error, name string) error {
	if name == "" || strings.Contains(err.Error(), name) {
		return err
	}
	return fmt.Errorf("%s: %w", name, err)
}

// applyBatch runs op on every item with at most threads goroutines (0: one
// per CPU), all owned by this call. Strict, the first error cancels the
// rest and is returned, naming the item's index and source; otherwise
// failed items are left out and their errors listed. The results, which
// must share dtype and shape, are stacked into one tensor (N, ...): the
// answer is the tuple (batch, [the errors of the items left out]).
func applyBatch(op ops.Op, items value.List, names []string, threads int, strict bool) (any, error) {
	n := len(items)
	if n == 0 {
		return nil, invalid(errors.New("io: a batch needs at least one input"))
	}
	if threads == 0 {
		threads = pipeline.Cores
	}
	st := &stacker{n: n, names: names}
	done := make([]bool, n)      // item i is in the batch
	failures := make([]error, n) // not strict: each item's error
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(min(threads, n))
	for i, item := range items {
		items[i] = nil
		if ctx.Err() != nil { // a failure: start no more
			value.Release(item)
			continue
		}
		g.Go(func() (err error) {
			// guard covers only the export's own goroutine; a panic here
			// would kill the host process.
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("item %d (%s): spdl-go internal error (please report): panic: %v\n%s", i, names[i], r, debug.Stack())
				}
			}()
			if ctx.Err() != nil {
				value.Release(item)
				return nil
			}
			out, err := op.Process(ctx, item)
			if err != nil {
				if ctx.Err() != nil && errors.Is(err, context.Canceled) {
					return nil // stopped by another item's failure, which wins
				}
				err = fmt.Errorf("item %d (%s): %w", i, names[i], nameError(err, names[i]))
				if !strict {
					failures[i] = err
					return nil
				}
				return err
			}
			t, ok := out.(*tensor.Tensor)
			if !ok {
				value.Release(out)
				return fmt.Errorf("item %d (%s): the op returned %s, not a tensor", i, names[i], value.Describe(out))
			}
			if err := st.put(i, t); err != nil {
				return err
			}
			done[i] = true
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		if st.batch != nil {
			st.batch.Release()
		}
		return nil, err
	}
	errs := value.List{}
	for _, err := range failures {
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	if st.batch == nil {
		return nil, fmt.Errorf("every item failed; the first: %s", errs[0])
	}
	if len(errs) == 0 {
		return value.Tuple{st.batch, errs}, nil
	}
	// Some items were left out: close the gaps in a smaller batch.
	defer st.batch.Release()
	batch, err := tensor.New(st.batch.DType(), append([]int64{int64(n - len(errs))}, st.shape...)...)
	if err != nil {
		return nil, err
	}
	b, row := batch.Bytes(), st.batch.NBytes()/n
	k := 0
	for i, ok := range done {
		if ok {
			copy(b[k*row:(k+1)*row], st.batch.Bytes()[i*row:(i+1)*row])
			k++
		}
	}
	return value.Tuple{batch, errs}, nil
}

// stacker gathers a batch's results as they come: the first allocates the
// batch tensor, and each is copied into its row by the goroutine that made
// it, so the copies run in parallel and each result's memory returns to
// the pool at once (warm for the next decode).
type stacker struct {
	n     int
	names []string

	mu    sync.Mutex
	batch *tensor.Tensor // nil until the first result
	first int            // the item that set the batch's shape
	desc  string         // that item's tensor, for errors
	shape []int64
}

// put copies item i's result t into the batch and releases t.
func (s *stacker) put(i int, t *tensor.Tensor) error {
	defer t.Release()
	s.mu.Lock()
	if s.batch == nil {
		b, err := tensor.New(t.DType(), append([]int64{int64(s.n)}, t.Shape()...)...)
		if err != nil {
			s.mu.Unlock()
			return fmt.Errorf("item %d (%s): %w", i, s.names[i], err)
		}
		s.batch, s.first, s.desc, s.shape = b, i, t.String(), t.Shape()
	}
	batch, first, desc, shape := s.batch, s.first, s.desc, s.shape
	s.mu.Unlock()
	if t.DType() != batch.DType() || !slices.Equal(t.Shape(), shape) {
		return fmt.Errorf("item %d (%s) is %v but item %d (%s) is %s: a batch needs one size (give a size or a crop)",
			i, s.names[i], t, first, s.names[first], desc)
	}
	// Rows are disjoint: goroutines copy into the batch side by side.
	return tensor.CopyInto(batch, []int64{int64(i)}, t)
}

//export spdl_io_load
func spdl_io_load(format *C.spdl_cchar, optsJSON *C.spdl_cchar, optsLen C.size_t, data *C.spdl_cvoid, dataLen C.size_t, out *C.spdl_buf, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	var opts []byte
	if optsJSON != nil {
		opts = C.GoBytes(unsafe.Pointer(optsJSON), C.int(optsLen))
	}
	v, err := ioLoad(C.GoString(format), opts, borrowed(unsafe.Pointer(data), dataLen))
	return ioResult(v, err, out, errOut)
}

// ioLoad parses b (borrowed for the call) as format; every result is new
// C memory or plain values.
func ioLoad(format string, rawOpts, b []byte) (any, error) {
	m := map[string]any{}
	if len(rawOpts) > 0 {
		if err := decodeJSON(rawOpts, &m); err != nil {
			return nil, invalid(fmt.Errorf("load_%s: options are not a JSON object: %w", format, err))
		}
	}
	r := options.New(m)
	name, err := r.String("name", "")
	if err != nil {
		return nil, invalid(fmt.Errorf("load_%s: %w", format, err))
	}
	v, err := loadFormat(format, r, b)
	if err != nil {
		if _, ok := errors.AsType[*invalidError](err); ok {
			return nil, err
		}
		return nil, nameError(err, name)
	}
	return v, nil
}

func loadFormat(format string, r *options.Reader, b []byte) (any, error) {
	bad := func(err error) error { return invalid(fmt.Errorf("load_%s: %w", format, err)) }
	switch format {
	case "npy":
		if err := r.Done(); err != nil {
			return nil, bad(err)
		}
		a, err := formats.ParseNpy(b)
		if err != nil {
			return nil, err
		}
		return arrayTensor(a)
	case "npz":
		limit, err := r.Int("max_uncompressed_bytes", formats.DefaultMaxUncompressed)
		if err == nil {
			err = r.Done()
		}
		if err == nil && limit < 0 {
			err = fmt.Errorf("max_uncompressed_bytes must be >= 0, got %d", limit)
		}
		if err != nil {
			return nil, bad(err)
		}
		entries, err := formats.ParseNpz(b, limit)
		if err != nil {
			return nil, err
		}
		d := value.NewDict(len(entries))
		for _, e := range entries {
			t, err := arrayTensor(e.Array)
			if err != nil {
				value.Release(d)
				return nil, fmt.Errorf("npz: member %q: %w", e.Name, err)
			}
			d.Set(e.Name, t)
		}
		return d, nil
	case "wav":
		offset, err := r.Number("time_offset_seconds", 0)
		var duration float64
		if err == nil {
			duration, err = r.Number("duration_seconds", -1)
			if err == nil && r.Has("duration_seconds") && !(duration >= 0) {
				err = fmt.Errorf("duration_seconds must be >= 0, got %v", duration)
			}
		}
		if err == nil {
			err = r.Done()
		}
		if err != nil {
			return nil, bad(err)
		}
		w, err := formats.ParseWAV(b)
		if err != nil {
			return nil, err
		}
		if err := w.Window(offset, duration); err != nil {
			return nil, err
		}
		dt, _ := tensor.ParseDType(w.DType())
		t, err := tensor.New(dt, w.Frames(), int64(w.Channels))
		if err != nil {
			return nil, err
		}
		copy(t.Bytes(), w.Data)
		return value.Tuple{t, int64(w.SampleRate)}, nil
	case "tar":
		if err := r.Done(); err != nil {
			return nil, bad(err)
		}
		entries, err := formats.ParseTar(b)
		if err != nil {
			return nil, err
		}
		out := make(value.List, len(entries))
		for i, e := range entries {
			out[i] = value.Tuple{e.Name, e.Offset, e.Size}
		}
		return out, nil
	}
	return nil, invalid(fmt.Errorf("io: unknown format %q (want npy, npz, wav or tar)", format))
}

// arrayTensor copies a parsed array into a new tensor, in C order.
func arrayTensor(a *formats.Array) (*tensor.Tensor, error) {
	dt, err := tensor.ParseDType(a.DType())
	if err != nil {
		return nil, err
	}
	t, err := tensor.New(dt, a.Shape...)
	if err != nil {
		return nil, err
	}
	if b := t.Bytes(); b != nil {
		a.CopyC(b)
	}
	return t, nil
}

//export spdl_io_encode_image
func spdl_io_encode_image(in *C.spdl_cvoid, inLen C.size_t, optsJSON *C.spdl_cchar, optsLen C.size_t, out *C.spdl_buf, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	var opts []byte
	if optsJSON != nil {
		opts = C.GoBytes(unsafe.Pointer(optsJSON), C.int(optsLen))
	}
	enc, err := ioEncodeImage(borrowed(unsafe.Pointer(in), inLen), opts)
	if err == nil {
		p := C.malloc(C.size_t(max(len(enc), 1)))
		if p == nil {
			err = errors.New("encode_image: out of memory")
		} else {
			copy(unsafe.Slice((*byte)(p), len(enc)), enc)
			out.data, out.len = (*C.uint8_t)(p), C.size_t(len(enc))
			return C.SPDL_OK
		}
	}
	setErr(errOut, err)
	if _, ok := errors.AsType[*invalidError](err); ok {
		return C.SPDL_INVALID
	}
	return C.SPDL_ERROR
}

// imageOptions are spdl_io_encode_image's options.
type imageOptions struct {
	format      string // "jpeg" or "png"
	pixFmt      string // "rgb24", "bgr24", "rgba", "gray", "gray16"
	quality     int    // JPEG 1..100
	subsampling string // JPEG "420", "422", "444"
	level       int    // PNG compression level, -1 default, 0..9
}

func ioEncodeImage(in, raw []byte) ([]byte, error) {
	m := map[string]any{}
	if len(raw) > 0 {
		if err := decodeJSON(raw, &m); err != nil {
			return nil, invalid(fmt.Errorf("encode_image: options are not a JSON object: %w", err))
		}
	}
	v, err := pyDecoder.Decode(in)
	if err != nil {
		return nil, invalid(fmt.Errorf("encode_image: the input is not a wire value: %w", err))
	}
	t, ok := v.(*tensor.Tensor)
	if !ok {
		value.Release(v)
		return nil, invalid(fmt.Errorf("encode_image: expected an array (anything with __dlpack__), got %s", value.Describe(v)))
	}
	defer t.Release()
	o, err := readImageOptions(options.New(m), t)
	if err != nil {
		return nil, invalid(fmt.Errorf("encode_image: %w", err))
	}
	if !t.Contiguous() || (t.Bytes() == nil && t.Numel() > 0) {
		c, err := tensor.New(t.DType(), t.Shape()...)
		if err != nil {
			return nil, err
		}
		defer c.Release()
		if err := tensor.CopyInto(c, nil, t); err != nil {
			return nil, invalid(fmt.Errorf("encode_image: %w", err))
		}
		t = c
	}
	shape := t.Shape()
	h, w := int(shape[0]), int(shape[1])
	if o.format == "png" {
		return encodePNG(t.Bytes(), h, w, o)
	}
	return encodeJPEG(t.Bytes(), h, w, o)
}

func readImageOptions(r *options.Reader, t *tensor.Tensor) (imageOptions, error) {
	var o imageOptions
	var q, level int64
	var err error
	o.format, err = r.String("format", "")
	if err == nil {
		o.pixFmt, err = r.String("pix_fmt", "")
	}
	if err == nil {
		q, err = r.Int("quality", 75)
	}
	if err == nil {
		o.subsampling, err = r.String("subsampling", "420")
	}
	if err == nil {
		level, err = r.Int("compression_level", -1)
	}
	if err == nil {
		err = r.Done()
	}
	if err != nil {
		return o, err
	}
	o.quality, o.level = int(q), int(level)
	switch {
	case o.format != "jpeg" && o.format != "png":
		return o, fmt.Errorf("format must be \"jpeg\" or \"png\", got %q", o.format)
	case q < 1 || q > 100:
		return o, fmt.Errorf("quality must be 1..100, got %d", q)
	case level < -1 || level > 9:
		return o, fmt.Errorf("compression_level must be -1 (default) or 0..9, got %d", level)
	case o.subsampling != "420" && o.subsampling != "422" && o.subsampling != "444":
		return o, fmt.Errorf("subsampling must be \"420\", \"422\" or \"444\", got %q", o.subsampling)
	case !t.OnCPU():
		return o, fmt.Errorf("the array is on %v; copy it to the CPU first", t.Device())
	}
	shape := t.Shape()
	channels := int64(1)
	switch len(shape) {
	case 2:
	case 3:
		channels = shape[2]
	default:
		return o, fmt.Errorf("expected an image of shape (H, W), (H, W, 1), (H, W, 3) or (H, W, 4), got %v", shape)
	}
	if shape[0] < 1 || shape[1] < 1 || shape[0] > math.MaxInt32/8 || shape[1] > math.MaxInt32/8 {
		return o, fmt.Errorf("image of %dx%d pixels cannot be encoded", shape[1], shape[0])
	}
	if channels != 1 && channels != 3 && channels != 4 {
		return o, fmt.Errorf("expected an image of shape (H, W), (H, W, 1), (H, W, 3) or (H, W, 4), got %v", shape)
	}
	if o.pixFmt == "" {
		o.pixFmt = map[int64]string{1: "gray", 3: "rgb24", 4: "rgba"}[channels]
		if o.pixFmt == "gray" && t.DType() == tensor.UInt16 {
			o.pixFmt = "gray16"
		}
	}
	want := map[string]int64{"rgb24": 3, "bgr24": 3, "rgba": 4, "gray": 1, "gray16": 1}
	c, ok := want[o.pixFmt]
	switch {
	case !ok:
		return o, fmt.Errorf("pix_fmt must be \"rgb24\", \"bgr24\", \"rgba\", \"gray\" or \"gray16\", got %q", o.pixFmt)
	case c != channels:
		return o, fmt.Errorf("pix_fmt %q needs %d channels, the array has shape %v", o.pixFmt, c, shape)
	case o.pixFmt == "gray16" && t.DType() != tensor.UInt16:
		return o, fmt.Errorf("pix_fmt \"gray16\" needs a uint16 array, got %v", t.DType())
	case o.pixFmt != "gray16" && t.DType() != tensor.UInt8:
		return o, fmt.Errorf("pix_fmt %q needs a uint8 array, got %v", o.pixFmt, t.DType())
	case o.format == "jpeg" && o.pixFmt == "gray16":
		return o, errors.New("JPEG holds 8-bit samples; save a uint16 image as PNG")
	}
	return o, nil
}
