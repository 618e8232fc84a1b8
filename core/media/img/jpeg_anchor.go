package img

/*
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

// spdl_tj_anchor decodes each of n JPEGs (concatenated in data, sizes in
// sizes) to full-size RGB into dst with one TurboJPEG handle, as a plain
// C user of libjpeg-turbo would: the cost every decode here is compared
// with. Returns the index of the first that fails, or -1.
static int spdl_tj_anchor(tjhandle h, const unsigned char *data, const size_t *sizes, int n,
                          unsigned char *dst) {
  for (int i = 0; i < n; i++) {
    int w, hh, ss, cs;
    if (tjDecompressHeader3(h, data, sizes[i], &w, &hh, &ss, &cs) != 0) return i;
    if (tjDecompress2(h, data, sizes[i], dst, w, 0, hh, TJPF_RGB, 0) != 0) return i;
    data += sizes[i];
  }
  return -1;
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// tjAnchor is the reference every JPEG decode is measured against: a C
// loop of tjDecompress2 (flags 0, as decodeJPEG) over JPEGs held in C
// memory, decoding into one reused C buffer. Benchmarks only.
type tjAnchor struct {
	h     C.tjhandle
	data  *C.uchar
	sizes *C.size_t
	n     int
	dst   *C.uchar
}

// newTJAnchor copies files into C memory; free it with free.
func newTJAnchor(files [][]byte, maxPixels int) (*tjAnchor, error) {
	a := &tjAnchor{n: len(files)}
	total := 0
	for _, f := range files {
		total += len(f)
	}
	a.h = C.tjInitDecompress()
	a.data = (*C.uchar)(C.malloc(C.size_t(max(total, 1))))
	a.sizes = (*C.size_t)(C.malloc(C.size_t(max(len(files), 1)) * C.size_t(unsafe.Sizeof(C.size_t(0)))))
	a.dst = (*C.uchar)(C.malloc(C.size_t(maxPixels) * 3))
	if a.h == nil || a.data == nil || a.sizes == nil || a.dst == nil {
		a.free()
		return nil, fmt.Errorf("out of memory for a %d-file anchor", len(files))
	}
	data := unsafe.Slice((*byte)(a.data), max(total, 1))
	sizes := unsafe.Slice(a.sizes, max(len(files), 1))
	off := 0
	for i, f := range files {
		off += copy(data[off:], f)
		sizes[i] = C.size_t(len(f))
	}
	// Touch the output once so that the timed loops find it mapped.
	C.memset(unsafe.Pointer(a.dst), 0, C.size_t(maxPixels)*3)
	return a, nil
}

// run decodes every file once.
func (a *tjAnchor) run() error {
	runtime.LockOSThread() // tjGetErrorStr2 reads a thread-local message
	defer runtime.UnlockOSThread()
	if i := C.spdl_tj_anchor(a.h, a.data, a.sizes, C.int(a.n), a.dst); i >= 0 {
		return fmt.Errorf("anchor: file %d: %s", int(i), C.GoString(C.tjGetErrorStr2(a.h)))
	}
	return nil
}

func (a *tjAnchor) free() {
	if a.h != nil {
		C.tjDestroy(a.h)
	}
	C.free(unsafe.Pointer(a.data))
	C.free(unsafe.Pointer(a.sizes))
	C.free(unsafe.Pointer(a.dst))
	*a = tjAnchor{}
}

// tjReference decodes data whole with tjDecompress2, flags 0, to mode's
// pixel format, into Go memory: what decodeJPEG's pixels must equal.
func tjReference(data []byte, mode Mode) (pix []byte, h, w int, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	th := C.tjInitDecompress()
	if th == nil {
		return nil, 0, 0, fmt.Errorf("tjInitDecompress failed")
	}
	defer C.tjDestroy(th)
	src := (*C.uchar)(C.CBytes(data))
	defer C.free(unsafe.Pointer(src))
	var cw, ch, ss, cs C.int
	if C.tjDecompressHeader3(th, src, C.ulong(len(data)), &cw, &ch, &ss, &cs) != 0 {
		return nil, 0, 0, fmt.Errorf("header: %s", C.GoString(C.tjGetErrorStr2(th)))
	}
	pf, c := C.TJPF_RGB, 3
	switch mode {
	case BGR:
		pf = C.TJPF_BGR
	case Gray:
		pf, c = C.TJPF_GRAY, 1
	}
	n := int(cw) * int(ch) * c
	dst := (*C.uchar)(C.malloc(C.size_t(n)))
	if dst == nil {
		return nil, 0, 0, fmt.Errorf("out of memory")
	}
	defer C.free(unsafe.Pointer(dst))
	if C.tjDecompress2(th, src, C.ulong(len(data)), dst, cw, 0, ch, C.int(pf), 0) != 0 {
		return nil, 0, 0, fmt.Errorf("decode: %s", C.GoString(C.tjGetErrorStr2(th)))
	}
	return C.GoBytes(unsafe.Pointer(dst), C.int(n)), int(ch), int(cw), nil
}
