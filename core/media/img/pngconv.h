// Exact pixel-layout conversion for the outputs spdl_convert_packed
// (kernels.h) does not make: RGBA (alpha kept, or made opaque) and 16-bit
// samples. Pure functions: they read src, write dst, keep no pointer.
#ifndef SPDL_IMG_PNGCONV_H
#define SPDL_IMG_PNGCONV_H

#include <stdint.h>

// spdl_px_convert converts h rows of w pixels in layout sfmt (SPDL_PK_* of
// kernels.h) with sdepth-bit samples (8, or 16 in big-endian order when
// sbig, else native) into dfmt (SPDL_PK_RGB, _BGR, _GRAY or _RGBA) with
// ddepth-bit native samples (8 or 16). pal (SPDL_PK_PAL8 only) holds 256
// native-endian 0xAARRGGBB entries.
//
// The rules (the 8-bit output is the one spdl_ff_convert's 8-bit path makes):
//   - 16 -> 8 bits rounds each sample, v * 255 / 65535, before any colour
//     conversion;
//   - 8 -> 16 bits multiplies the 8-bit result by 257;
//   - gray from colour is ITU-R 601-2 luma at the working depth (16 bits
//     only for 16-bit in and out), (19595 R + 38470 G + 7471 B + 32768) >> 16,
//     so 16-bit gray of 16-bit colour can differ by 1/255 from the 8-bit;
//   - a missing alpha is opaque (255 or 65535); RGB, BGR and gray drop it.
// Returns 0, or -1 for a combination it does not handle.
int spdl_px_convert(const uint8_t *src, int64_t src_stride, int sfmt, int sdepth, int sbig,
                    const uint32_t *pal, uint8_t *dst, int64_t dst_stride, int dfmt, int ddepth,
                    int32_t h, int32_t w);

// spdl_px_widen turns h rows of n 8-bit samples into 16-bit ones (v * 257)
// in place: row y's bytes start at buf + y * stride, and the stride holds
// 2n bytes. It works from each row's end, so nothing is read after it is
// overwritten.
void spdl_px_widen(uint8_t *buf, int64_t stride, int32_t h, int64_t n);

#endif
