package img

/*
#cgo pkg-config: libjpeg
#include "jpegwin.h"
#include "kernels.h"
*/
import "C"

import (
	"errors"
	"math"
	"unsafe"

	"github.com/spdl-go/spdl-go/core/tensor"
)

// windowMargin is how many source pixels beyond the resampling taps a
// window decode reads on each side: libjpeg upsamples chroma at the edge
// of a cropped or skipped region from the edge itself, so the outermost
// pixels may differ from a full decode; the margin keeps them out of use.
const windowMargin = 4

// iMCUSlack is the most jpeg_crop_scanline widens a window by: it moves
// the left edge down to an iMCU column, at most 4 (sampling) x 8 (DCT) pixels.
const iMCUSlack = 32

// need returns the source pixels [lo, hi) of an axis of n pixels that
// the resampling kernel reads for the outputs made, plus windowMargin.
func (a axis) need(n int) (lo, hi int) {
	scale := a.len / float64(a.full)
	support := max(scale, 1) + 1 // bilinear's, the widest filter, and a pixel more
	first := a.off + (float64(a.outOff)+0.5)*scale
	last := a.off + (float64(a.outOff+a.outLen)-0.5)*scale
	// The kernel reads only the axis's window; the margin goes outside it.
	lo = max(int(math.Floor(first-support)), int(math.Floor(a.off))) - windowMargin
	hi = min(int(math.Ceil(last+support)), int(math.Ceil(a.off+a.len))) + windowMargin
	lo = min(max(lo, 0), n-1)
	return lo, min(max(hi, lo+1), n)
}

// shifted is the axis on a window of the source starting at pixel by.
func (a axis) shifted(by int) axis {
	a.off -= float64(by)
	return a
}

// errDecodeWhole sends a JPEG that a window decode does not speed up
// (progressive) to the whole-image decode.
var errDecodeWhole = errors.New("decode the whole JPEG")

// windowDecoders is a free list of libjpeg decompressors for window
// decodes, as handles is for TurboJPEG.
var windowDecoders = decoderPool[*C.spdl_jpeg]{
	newFn:  func() *C.spdl_jpeg { return C.spdl_jpeg_new() },
	freeFn: func(d *C.spdl_jpeg) { C.spdl_jpeg_free(d) },
}

// decodeJPEGWindow decodes rows [y0, y1) and columns [x0, x1) (at least:
// libjpeg snaps x0 down to an iMCU column) of the JPEG at scaling s (an
// sh x sw image) into a scratch tensor, stopping after row y1, and runs p
// on that window. A progressive JPEG fails with errDecodeWhole. Errors are those of the full-size decode: a fatal
// libjpeg error, or a truncation warning, fails; other warnings do not.
func decodeJPEGWindow(data []byte, p plan, mode Mode, s scaling, sh, sw, y0, y1, x0, x1 int) (*tensor.Tensor, error) {
	d, err := windowDecoders.get()
	if err != nil {
		return nil, err
	}
	c := mode.Channels()
	stride := (x1 - x0 + iMCUSlack) * c
	scratch, err := tensor.New(tensor.UInt8, int64(y1-y0), int64(x1-x0+iMCUSlack), int64(c))
	if err != nil {
		windowDecoders.put(d)
		return nil, err
	}
	defer scratch.Release()
	win := C.spdl_jpeg_win(d) // in C memory: nothing here escapes to the Go heap
	*win = C.spdl_jpeg_window{
		scale_num: C.int32_t(s.num), scale_denom: C.int32_t(s.denom), fmt: mode.packed(),
		h: C.int32_t(sh), w: C.int32_t(sw),
		x0: C.int32_t(x0), x1: C.int32_t(x1), y0: C.int32_t(y0), y1: C.int32_t(y1),
	}
	rc := C.spdl_jpeg_decode_window(d, (*C.uint8_t)(unsafe.Pointer(&data[0])), C.size_t(len(data)), win,
		(*C.uint8_t)(scratch.Data()), C.int64_t(stride))
	msg := C.GoString(&win.msg[0])
	outX0, outW := int(win.out_x0), int(win.out_w)
	if rc == C.SPDL_JPEG_ERROR {
		// Like a TurboJPEG handle, a decompressor that failed is not reused.
		C.spdl_jpeg_free(d)
	} else {
		windowDecoders.put(d)
	}
	switch {
	case rc == C.SPDL_JPEG_CMYK:
		return nil, errUseFFmpeg
	case rc == C.SPDL_JPEG_WHOLE:
		return nil, errDecodeWhole
	case rc == C.SPDL_JPEG_ERROR || rc == C.SPDL_JPEG_WARNING && isTruncationMsg(msg):
		return nil, jpegMsgErr(msg, data, "while decoding")
	}
	p.y = p.y.shifted(y0)
	p.x = p.x.shifted(outX0)
	return p.run(scratch.Bytes(), y1-y0, outW, c, stride)
}
