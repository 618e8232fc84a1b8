// Decoding a window of a JPEG with libjpeg-turbo's libjpeg API
// (jpeg_crop_scanline, jpeg_skip_scanlines), for a resize or crop that
// needs only part of the image.
#ifndef SPDL_IMG_JPEGWIN_H
#define SPDL_IMG_JPEGWIN_H

#include <stddef.h>
#include <stdint.h>

// A reusable decompressor: libjpeg state in C memory, made by
// spdl_jpeg_new and freed (once) by spdl_jpeg_free. Not safe for
// concurrent use.
typedef struct spdl_jpeg spdl_jpeg;

spdl_jpeg *spdl_jpeg_new(void);
void spdl_jpeg_free(spdl_jpeg *d);

enum {
  SPDL_JPEG_OK = 0,
  SPDL_JPEG_ERROR = 1,    // libjpeg failed: msg says why; dst is garbage
  SPDL_JPEG_WARNING = 2,  // decoded with warnings: msg holds the first one
  SPDL_JPEG_CMYK = 3,     // CMYK or YCCK: not decoded
  SPDL_JPEG_WHOLE = 4,    // progressive: not decoded (a window saves nothing; decode it whole)
};

typedef struct {
  // In.
  int32_t scale_num, scale_denom;  // DCT scaling
  int32_t fmt;          // SPDL_PK_RGB, SPDL_PK_BGR or SPDL_PK_GRAY (kernels.h)
  int32_t h, w;         // the scaled image size the caller expects
  int32_t x0, x1;       // columns wanted, of the scaled image
  int32_t y0, y1;       // rows wanted
  // Out.
  int32_t out_x0, out_w;  // columns decoded: x0 snapped down to an iMCU column
  char msg[200];          // JMSG_LENGTH_MAX
} spdl_jpeg_window;

// spdl_jpeg_win is d's window record, for the caller to fill in before
// spdl_jpeg_decode_window and read after (it lives as long as d).
spdl_jpeg_window *spdl_jpeg_win(spdl_jpeg *d);

// spdl_jpeg_decode_window decodes rows [y0, y1) and at least columns
// [x0, x1) of the JPEG in data into dst (rows dst_stride bytes apart,
// columns [out_x0, out_x0 + out_w) of the scaled image), and stops after
// row y1 without reading the rest of the data. Accurate integer IDCT and
// smooth chroma upsampling, as tjDecompress2 with flags 0. libjpeg errors
// longjmp back here: nothing exits the process, and data and dst are not
// kept. After SPDL_JPEG_ERROR free d rather than reuse it.
int spdl_jpeg_decode_window(spdl_jpeg *d, const uint8_t *data, size_t size, spdl_jpeg_window *win,
                            uint8_t *dst, int64_t dst_stride);

#endif
