// Pixel kernels on packed 8-bit images (rows of w*c bytes). Every function
// here is pure: it reads src, writes dst, allocates only what it frees
// before returning, and keeps no pointer. The caller checks sizes.
#ifndef SPDL_IMG_KERNELS_H
#define SPDL_IMG_KERNELS_H

#include <stddef.h>
#include <stdint.h>

enum {
  SPDL_FILTER_NEAREST = 0,   // the source pixel whose area holds the output centre
  SPDL_FILTER_BILINEAR = 1,  // triangle filter, widened by the scale when shrinking
  SPDL_FILTER_AREA = 2,      // box filter, widened by the scale: area averaging
};

// One axis of a resize. The full resize maps the source interval
// [src_off, src_off + src_len) (in pixels, fractional allowed) onto
// out_full output pixels; only outputs [out_off, out_off + out_len) are
// computed. Taps never read outside [floor(src_off), ceil(src_off + src_len))
// clamped to the image: a crop sees only its window.
typedef struct {
  double src_off, src_len;
  int32_t out_full, out_off, out_len;
} spdl_axis;

// spdl_resize_u8 resamples src (sh rows of sw pixels of c channels,
// src_stride bytes apart) into dst (ay.out_len rows of ax.out_len pixels,
// dst_stride bytes apart). flip_x mirrors the output horizontally for free.
// The vertical pass runs first, on the source columns the horizontal pass
// needs, summing Q14 weights exactly in int32 into a float row; the
// horizontal pass works on one pixel per 4-float vector, four pixels at a
// time. Weights sum to exactly 1, so a flat image stays exact and an axis
// that is not resized copies exactly. Returns 0, or -1 if out of memory.
int spdl_resize_u8(const uint8_t *src, int32_t sh, int32_t sw, int32_t c, int64_t src_stride,
                   uint8_t *dst, int64_t dst_stride, spdl_axis ay, spdl_axis ax, int filter,
                   int flip_x);

// spdl_hflip_u8 writes src mirrored left-right into dst (both packed h*w*c).
void spdl_hflip_u8(const uint8_t *src, uint8_t *dst, int32_t h, int32_t w, int32_t c);

// spdl_normalize_u8 writes lut[ch][src] as float32, in CHW (chw != 0) or
// HWC order. lut holds 256 values per channel.
void spdl_normalize_u8(const uint8_t *src, float *dst, int64_t pixels, int32_t c,
                       const float *lut, int chw);

// Packed pixel layouts for spdl_convert_packed.
enum {
  SPDL_PK_RGB = 0,   // 3 bytes R, G, B
  SPDL_PK_BGR = 1,   // 3 bytes B, G, R
  SPDL_PK_GRAY = 2,  // 1 byte
  SPDL_PK_RGBA = 3,  // 4 bytes, alpha dropped
  SPDL_PK_BGRA = 4,
  SPDL_PK_ARGB = 5,
  SPDL_PK_ABGR = 6,
  SPDL_PK_GRAYA = 7,  // 2 bytes Y, A
  SPDL_PK_PAL8 = 8,   // 1 byte index into pal: 256 native-endian 0xAARRGGBB
};

// spdl_convert_packed converts h rows of w pixels from layout sfmt to
// dfmt (SPDL_PK_RGB, SPDL_PK_BGR or SPDL_PK_GRAY), exactly (colour to gray
// uses ITU-R 601-2 luma, L = (19595 R + 38470 G + 7471 B + 32768) >> 16).
// Returns 0, or -1 for a combination it does not handle.
int spdl_convert_packed(const uint8_t *src, int64_t src_stride, int sfmt, const uint32_t *pal,
                        uint8_t *dst, int64_t dst_stride, int dfmt, int32_t h, int32_t w);

#endif
