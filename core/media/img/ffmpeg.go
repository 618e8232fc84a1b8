package img

/*
#include <stdlib.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libavutil/pixdesc.h>
#include "ffdecode.h"

static int spdl_frame_width(const AVFrame *f) { return f->width; }
static int spdl_frame_height(const AVFrame *f) { return f->height; }
static const char *spdl_frame_format(const AVFrame *f) { return av_get_pix_fmt_name(f->format); }
static int spdl_averror(int e) { return AVERROR(e); }
static uint8_t *spdl_frame_data(const AVFrame *f) { return f->data[0]; }
static int spdl_frame_linesize(const AVFrame *f) { return f->linesize[0]; }
*/
import "C"

import (
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/spdl-go/spdl-go/core/tensor"
)

var quietOnce sync.Once

// ffProbe names the libavformat demuxer that recognises data, and its
// long name, or "".
func ffProbe(data []byte) (string, string) {
	quietOnce.Do(func() { C.spdl_ff_quiet() })
	var long *C.char
	name := C.spdl_ff_probe((*C.uint8_t)(unsafe.Pointer(&data[0])), C.int(min(len(data), math.MaxInt32)), &long)
	if name == nil {
		return "", ""
	}
	return C.GoString(name), C.GoString(long)
}

func averror(code C.int) string {
	var buf [128]C.char
	C.av_strerror(code, &buf[0], C.size_t(len(buf)))
	return C.GoString(&buf[0])
}

// decodeFFmpeg decodes the first picture in data with the named libavcodec
// decoder, converts it to the mode's packed layout at full size, then
// applies the plan.
func decodeFFmpeg(data []byte, decoder string, f format, o *DecodeOptions) (*tensor.Tensor, error) {
	quietOnce.Do(func() { C.spdl_ff_quiet() })
	if len(data) > math.MaxInt32-64 {
		return nil, fmt.Errorf("%w: %d bytes of encoded data is over FFmpeg's packet limit", ErrTooLarge, len(data))
	}
	cname := C.CString(decoder)
	defer C.free(unsafe.Pointer(cname))
	var frame *C.AVFrame
	rc := C.spdl_ff_decode(cname, (*C.uint8_t)(unsafe.Pointer(&data[0])), C.int(len(data)), C.int64_t(o.maxPixels()), &frame)
	if rc < 0 {
		return nil, ffError(rc, decoder, f, o)
	}
	defer C.av_frame_free(&frame)
	W, H := int(C.spdl_frame_width(frame)), int(C.spdl_frame_height(frame))
	if err := o.checkSize(f, W, H); err != nil {
		return nil, err
	}
	p, err := o.plan(H, W)
	if err != nil {
		return nil, err
	}
	mode := o.Mode
	if !o.wide() && (mode == RGB || mode == BGR) && C.spdl_ff_is_gray(frame) != 0 {
		// A gray picture in colour: resample its one channel, then
		// replicate it over the output pixels only. The same values: the
		// filter treats each channel alike.
		t, err := ffPixels(frame, p, H, W, Gray, o)
		if err != nil {
			return nil, err
		}
		defer t.Release()
		return convertTensor(t, Gray, mode, 8)
	}
	return ffPixels(frame, p, H, W, mode, o)
}

// ffPixels converts frame to mode's packed layout at o's depth and
// applies the plan.
func ffPixels(frame *C.AVFrame, p plan, H, W int, mode Mode, o *DecodeOptions) (*tensor.Tensor, error) {
	c := mode.Channels()
	if !o.wide() && C.spdl_ff_is_packed(frame, mode.packed()) != 0 {
		// The frame already holds the output layout: resample (or copy)
		// from it, saving a pass over the whole picture.
		stride := int(C.spdl_frame_linesize(frame))
		src := unsafe.Slice((*byte)(C.spdl_frame_data(frame)), stride*(H-1)+W*c)
		return p.run(src, H, W, c, stride)
	}
	// swscale may write whole vectors: give each row slack, and one spare row.
	stride := (W*c*o.depth()/8 + 63) &^ 63
	scratch, err := tensor.New(tensor.UInt8, int64(H+1), int64(stride))
	if err != nil {
		return nil, err
	}
	defer scratch.Release()
	buf := scratch.Bytes()
	if rc := C.spdl_ff_convert(frame, (*C.uint8_t)(&buf[0]), C.int(stride), mode.packed(), C.int(o.depth())); rc < 0 {
		return nil, fmt.Errorf("%w: converting %s pixels: %s", ErrUnsupported, C.GoString(C.spdl_frame_format(frame)), averror(rc))
	}
	if o.wide() {
		return p.runWide(buf, H, W, c, stride)
	}
	return p.run(buf, H, W, c, stride)
}

// ffError explains a failed libavcodec decode.
func ffError(rc C.int, decoder string, f format, o *DecodeOptions) error {
	what := f.String()
	if f == fmtUnknown {
		what = decoder
	}
	switch {
	case rc == C.AVERROR_DECODER_NOT_FOUND:
		return fmt.Errorf("%w: this FFmpeg build has no %q decoder", ErrUnsupported, decoder)
	case rc == C.AVERROR_PATCHWELCOME:
		return fmt.Errorf("%w: FFmpeg's %s decoder does not handle this variant of %s", ErrUnsupported, decoder, what)
	case rc == C.spdl_averror(C.ENOMEM):
		return fmt.Errorf("out of memory decoding %s", what)
	case rc == C.spdl_averror(C.EINVAL) && f == fmtUnknown:
		// The usual cause: the size is over max_pixels (the decoder checks
		// it before allocating); for formats we parse it was checked above.
		return fmt.Errorf("%w or %w: %s data rejected by FFmpeg (%s); max_pixels is %d", ErrCorrupt, ErrTooLarge, what, averror(rc), o.maxPixels())
	}
	return fmt.Errorf("%w: FFmpeg cannot decode this %s: %s", ErrCorrupt, what, averror(rc))
}
