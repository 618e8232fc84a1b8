//go:build !nomedia

package main

// #cgo pkg-config: libturbojpeg
// #include <stdlib.h>
// #include <turbojpeg.h>
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// encodeJPEG compresses h x w pixels with TurboJPEG's tjCompress2 into a
// buffer of tjBufSize bytes (its bound for any input), so TurboJPEG never
// reallocates it. TJFLAG_ACCURATEDCT: TurboJPEG's default is the fast
// integer DCT, which costs visible quality at high settings (at quality 95
// a mean error 20% above libjpeg's own default, which Pillow uses).
func encodeJPEG(pix []byte, h, w int, o imageOptions) ([]byte, error) {
	pf := map[string]C.int{"rgb24": C.TJPF_RGB, "bgr24": C.TJPF_BGR, "rgba": C.TJPF_RGBX, "gray": C.TJPF_GRAY}[o.pixFmt]
	samp := map[string]C.int{"420": C.TJSAMP_420, "422": C.TJSAMP_422, "444": C.TJSAMP_444}[o.subsampling]
	if o.pixFmt == "gray" {
		samp = C.TJSAMP_GRAY
	}
	size := C.tjBufSize(C.int(w), C.int(h), samp)
	if size == C.ulong(^uint32(0)) { // (unsigned long)-1 in TurboJPEG 2.x
		return nil, fmt.Errorf("encode_image: a %dx%d image is too large for JPEG", w, h)
	}
	buf := (*C.uchar)(C.malloc(C.size_t(size)))
	if buf == nil {
		return nil, errors.New("encode_image: out of memory")
	}
	defer C.free(unsafe.Pointer(buf))
	handle := C.tjInitCompress()
	if handle == nil {
		return nil, errors.New("encode_image: out of memory creating a JPEG compressor")
	}
	defer C.tjDestroy(handle)
	// pix is C memory (a tensor) or a Go slice pinned for the call; TurboJPEG keeps neither.
	n := size
	bpp := map[string]int{"rgb24": 3, "bgr24": 3, "rgba": 4, "gray": 1}[o.pixFmt]
	if C.tjCompress2(handle, (*C.uchar)(unsafe.Pointer(&pix[0])), C.int(w), C.int(w*bpp), C.int(h), pf,
		&buf, &n, samp, C.int(o.quality), C.TJFLAG_NOREALLOC|C.TJFLAG_ACCURATEDCT) != 0 {
		return nil, fmt.Errorf("encode_image: JPEG: %s", C.GoString(C.tjGetErrorStr2(handle)))
	}
	return C.GoBytes(unsafe.Pointer(buf), C.int(n)), nil
}
