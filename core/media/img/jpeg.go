package img

/*
#include <turbojpeg.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/spdl-go/spdl-go/core/tensor"
)

// errUseFFmpeg sends a JPEG that libjpeg-turbo does not take (CMYK,
// lossless, 12-bit) to FFmpeg's decoder.
var errUseFFmpeg = errors.New("decode with FFmpeg")

// decoderPool keeps C decoder objects (TurboJPEG handles, libjpeg window
// decoders) for reuse: they are costly to create and not safe for
// concurrent use, so each decode takes one and puts it back. It keeps at
// most 2*GOMAXPROCS and frees the rest.
type decoderPool[T comparable] struct {
	mu     sync.Mutex
	free   []T
	newFn  func() T // returns the zero T when out of memory
	freeFn func(T)
}

func (p *decoderPool[T]) get() (T, error) {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		d := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return d, nil
	}
	p.mu.Unlock()
	var zero T
	d := p.newFn()
	if d == zero {
		return zero, errors.New("out of memory creating a JPEG decompressor")
	}
	return d, nil
}

func (p *decoderPool[T]) put(d T) {
	p.mu.Lock()
	if len(p.free) < 2*runtime.GOMAXPROCS(0) {
		p.free = append(p.free, d)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.freeFn(d)
}

// handles keeps TurboJPEG decompressors for the whole-image path.
var handles = decoderPool[C.tjhandle]{
	newFn:  func() C.tjhandle { return C.tjInitDecompress() },
	freeFn: func(h C.tjhandle) { C.tjDestroy(h) },
}

// scaling is a libjpeg-turbo DCT scaling factor below 1.
type scaling struct{ num, denom int }

// dctScalings are the reduced sizes JPEGs are decoded at, smallest first:
// 1/8, 1/4 and 1/2, which libjpeg-turbo computes with SIMD reduced
// IDCTs and which were faster than other factors (3/8, 5/8, 3/4, 7/8
// use scalar IDCTs and cost as much as or more than a full decode).
var dctScalings = sync.OnceValue(func() []scaling {
	var n C.int
	p := C.tjGetScalingFactors(&n)
	var out []scaling
	for _, f := range unsafe.Slice(p, int(n)) {
		s := scaling{int(f.num), int(f.denom)}
		if s.num*8 == s.denom || s.num*4 == s.denom || s.num*2 == s.denom {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b scaling) int { return a.num*b.denom - b.num*a.denom })
	return out
})

// scaled is TJSCALED: the size of dim at scaling s.
func (s scaling) scaled(dim int) int { return (dim*s.num + s.denom - 1) / s.denom }

// pickScaling returns the smallest DCT scaling whose output still covers
// the plan's output in both dimensions (so nothing is upsampled after),
// or nil for a full-size decode.
func pickScaling(p plan, h, w int) *scaling {
	if p.interp == Nearest || p.isIdentity(h, w) {
		return nil
	}
	for _, s := range dctScalings() {
		fy := float64(s.scaled(h)) / float64(h)
		fx := float64(s.scaled(w)) / float64(w)
		if p.y.len*fy >= float64(p.y.full) && p.x.len*fx >= float64(p.x.full) {
			return &s
		}
	}
	return nil
}

// jpegErr turns the handle's last error into an error of ours. A file cut
// short often fails with a consequential message (libjpeg pads missing
// data with an end marker, then trips over it), so a failing JPEG that
// does not end with its end-of-image marker counts as truncated.
func jpegErr(h C.tjhandle, data []byte, when string) error {
	return jpegMsgErr(C.GoString(C.tjGetErrorStr2(h)), data, when)
}

// jpegMsgErr is jpegErr for a libjpeg message.
func jpegMsgErr(msg string, data []byte, when string) error {
	switch {
	case strings.Contains(msg, "remature end") || strings.Contains(msg, "mpty input") || !endsWithEOI(data):
		return fmt.Errorf("%w: JPEG data ends early, %s (libjpeg: %s)", ErrTruncated, when, msg)
	case strings.HasPrefix(msg, "Unsupported JPEG") || strings.Contains(msg, "precision"):
		return errUseFFmpeg
	}
	return fmt.Errorf("%w: %s: JPEG %s", ErrCorrupt, when, msg)
}

// decodeJPEG decodes with libjpeg-turbo straight into pooled tensor
// memory: into the output when no resampling is left after the DCT
// scaling, otherwise into a scratch tensor that the plan resamples.
func decodeJPEG(data []byte, o *DecodeOptions) (*tensor.Tensor, error) {
	// TurboJPEG 2.1 keeps warning messages in a thread-local buffer that
	// tjGetErrorStr2 reads: the decode and the read of its message must
	// happen on one OS thread, or a truncation can go unnoticed.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	h, err := handles.get()
	if err != nil {
		return nil, err
	}
	// After a failure libjpeg may be left mid-stream (tjDecompressHeader3
	// does not reset it), so a handle that failed is destroyed, not reused.
	ok := false
	defer func() {
		if ok {
			handles.put(h)
		} else {
			C.tjDestroy(h)
		}
	}()
	buf, size := (*C.uchar)(unsafe.Pointer(&data[0])), C.ulong(len(data))
	var cw, ch, subsamp, cs C.int
	if C.tjDecompressHeader3(h, buf, size, &cw, &ch, &subsamp, &cs) != 0 {
		return nil, jpegErr(h, data, "in its header")
	}
	W, H := int(cw), int(ch)
	if err := o.checkSize(fmtJPEG, W, H); err != nil {
		return nil, err
	}
	if cs == C.TJCS_CMYK || cs == C.TJCS_YCCK {
		return nil, errUseFFmpeg
	}
	p, err := o.plan(H, W)
	if err != nil {
		return nil, err
	}
	sh, sw, sc := H, W, scaling{1, 1}
	if s := pickScaling(p, H, W); s != nil {
		sh, sw, sc = s.scaled(H), s.scaled(W), *s
		p.y = p.y.scaled(float64(sh) / float64(H))
		p.x = p.x.scaled(float64(sw) / float64(W))
	}
	c := o.Mode.Channels()
	// A crop needs only a window of the source: decode just that. A JPEG
	// cut short goes the full-size way, which reads to the end and so
	// reports the truncation whatever the window.
	if o.Crop.Kind != CropNone && !o.wholeJPEG && endsWithEOI(data) {
		y0, y1 := p.y.need(sh)
		x0, x1 := p.x.need(sw)
		if y1-y0 < sh || x1-x0 < sw {
			t, err := decodeJPEGWindow(data, p, o.Mode, sc, sh, sw, y0, y1, x0, x1)
			if err != errDecodeWhole {
				ok = true // h only read the header
				return t, err
			}
		}
	}
	pf := C.TJPF_RGB
	switch o.Mode {
	case BGR:
		pf = C.TJPF_BGR
	case Gray:
		pf = C.TJPF_GRAY
	}
	t, err := tensor.New(tensor.UInt8, int64(sh), int64(sw), int64(c))
	if err != nil {
		return nil, err
	}
	// Flags 0: accurate integer IDCT and smooth chroma upsampling.
	if C.tjDecompress2(h, buf, size, (*C.uchar)(t.Data()), C.int(sw), C.int(sw*c), C.int(sh), C.int(pf), 0) != 0 {
		// A warning still leaves a whole picture (corrupt data is patched
		// over); only a fatal error or a truncation fails the image.
		if C.tjGetErrorCode(h) == C.TJERR_FATAL || isTruncation(h) {
			t.Release()
			return nil, jpegErr(h, data, "while decoding")
		}
	}
	ok = true
	if p.isIdentity(sh, sw) {
		return t, nil
	}
	defer t.Release()
	return p.run(t.Bytes(), sh, sw, c, sw*c)
}

// endsWithEOI reports whether data ends with the JPEG end-of-image marker
// (FF D9), ignoring a little zero or whitespace padding.
func endsWithEOI(data []byte) bool {
	end := len(data)
	for end > 0 && len(data)-end < 16 && (data[end-1] == 0 || isSpace(data[end-1])) {
		end--
	}
	return end >= 2 && data[end-2] == 0xff && data[end-1] == 0xd9
}

func isTruncation(h C.tjhandle) bool {
	return isTruncationMsg(C.GoString(C.tjGetErrorStr2(h)))
}

func isTruncationMsg(msg string) bool { return strings.Contains(msg, "remature end") }
