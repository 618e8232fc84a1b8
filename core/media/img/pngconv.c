#include "pngconv.h"

#include <string.h>

#include "kernels.h"

// One pixel at working depth: r, g, b, a (gray sources set r = g = b).
typedef struct {
  uint32_t r, g, b, a;
} px;

static inline uint32_t sample(const uint8_t *s, int64_t i, const int depth, const int big) {
  if (depth == 8) return s[i];
  if (big) return (uint32_t)s[2 * i] << 8 | s[2 * i + 1];
  uint16_t v;
  memcpy(&v, s + 2 * i, 2);
  return v;
}

static inline uint32_t narrow(uint32_t v) { return (v * 255 + 32767) / 65535; }

// fetch reads pixel x of a row; wd is the working depth (8 or 16).
static inline px fetch(const uint8_t *s, int32_t x, const int sfmt, const int sdepth,
                       const int big, const uint32_t *pal, const int wd) {
  const uint32_t top = wd == 16 ? 65535 : 255;
  px p = {0, 0, 0, top};
  switch (sfmt) {
    case SPDL_PK_RGB:
    case SPDL_PK_BGR:
      p.r = sample(s, 3 * (int64_t)x, sdepth, big);
      p.g = sample(s, 3 * (int64_t)x + 1, sdepth, big);
      p.b = sample(s, 3 * (int64_t)x + 2, sdepth, big);
      if (sfmt == SPDL_PK_BGR) {
        uint32_t t = p.r;
        p.r = p.b, p.b = t;
      }
      break;
    case SPDL_PK_RGBA:
      p.r = sample(s, 4 * (int64_t)x, sdepth, big);
      p.g = sample(s, 4 * (int64_t)x + 1, sdepth, big);
      p.b = sample(s, 4 * (int64_t)x + 2, sdepth, big);
      p.a = sample(s, 4 * (int64_t)x + 3, sdepth, big);
      break;
    case SPDL_PK_BGRA:
      p.b = sample(s, 4 * (int64_t)x, sdepth, big);
      p.g = sample(s, 4 * (int64_t)x + 1, sdepth, big);
      p.r = sample(s, 4 * (int64_t)x + 2, sdepth, big);
      p.a = sample(s, 4 * (int64_t)x + 3, sdepth, big);
      break;
    case SPDL_PK_ARGB:
      p.a = sample(s, 4 * (int64_t)x, sdepth, big);
      p.r = sample(s, 4 * (int64_t)x + 1, sdepth, big);
      p.g = sample(s, 4 * (int64_t)x + 2, sdepth, big);
      p.b = sample(s, 4 * (int64_t)x + 3, sdepth, big);
      break;
    case SPDL_PK_ABGR:
      p.a = sample(s, 4 * (int64_t)x, sdepth, big);
      p.b = sample(s, 4 * (int64_t)x + 1, sdepth, big);
      p.g = sample(s, 4 * (int64_t)x + 2, sdepth, big);
      p.r = sample(s, 4 * (int64_t)x + 3, sdepth, big);
      break;
    case SPDL_PK_GRAY:
      p.r = p.g = p.b = sample(s, x, sdepth, big);
      break;
    case SPDL_PK_GRAYA:
      p.r = p.g = p.b = sample(s, 2 * (int64_t)x, sdepth, big);
      p.a = sample(s, 2 * (int64_t)x + 1, sdepth, big);
      break;
    case SPDL_PK_PAL8: {
      uint32_t e = pal[s[x]];
      p.r = (e >> 16) & 255, p.g = (e >> 8) & 255, p.b = e & 255, p.a = e >> 24;
      break;
    }
  }
  if (sdepth == 16 && wd == 8) {
    p.r = narrow(p.r), p.g = narrow(p.g), p.b = narrow(p.b);
    p.a = sfmt == SPDL_PK_RGBA || sfmt == SPDL_PK_BGRA || sfmt == SPDL_PK_ARGB ||
                  sfmt == SPDL_PK_ABGR || sfmt == SPDL_PK_GRAYA
              ? narrow(p.a)
              : 255;
  }
  return p;
}

static inline void store(uint8_t *d, int32_t x, const int dfmt, const int ddepth, const int wd,
                         const int gray_src, px p) {
  uint32_t v[4];
  int n;
  switch (dfmt) {
    case SPDL_PK_GRAY:
      v[0] = gray_src ? p.r : (19595 * p.r + 38470 * p.g + 7471 * p.b + 32768) >> 16;
      n = 1;
      break;
    case SPDL_PK_BGR:
      v[0] = p.b, v[1] = p.g, v[2] = p.r;
      n = 3;
      break;
    case SPDL_PK_RGBA:
      v[0] = p.r, v[1] = p.g, v[2] = p.b, v[3] = p.a;
      n = 4;
      break;
    default:
      v[0] = p.r, v[1] = p.g, v[2] = p.b;
      n = 3;
  }
  if (ddepth == 8) {
    for (int k = 0; k < n; k++) d[(int64_t)x * n + k] = (uint8_t)v[k];
    return;
  }
  uint16_t *d16 = (uint16_t *)(void *)d;  // dst rows are 2-byte aligned
  for (int k = 0; k < n; k++) d16[(int64_t)x * n + k] = (uint16_t)(wd == 16 ? v[k] : v[k] * 257);
}

// convert_rows is inlined with constant formats by the switch below, so
// that each combination gets its own loop without per-pixel branching.
static inline void convert_rows(const uint8_t *src, int64_t src_stride, const int sfmt,
                                const int sdepth, const int big, const uint32_t *pal,
                                uint8_t *dst, int64_t dst_stride, const int dfmt,
                                const int ddepth, int32_t h, int32_t w) {
  const int wd = sdepth == 16 && ddepth == 16 ? 16 : 8;
  const int gray_src = sfmt == SPDL_PK_GRAY || sfmt == SPDL_PK_GRAYA;
  for (int32_t y = 0; y < h; y++) {
    const uint8_t *s = src + (int64_t)y * src_stride;
    uint8_t *d = dst + (int64_t)y * dst_stride;
    for (int32_t x = 0; x < w; x++)
      store(d, x, dfmt, ddepth, wd, gray_src, fetch(s, x, sfmt, sdepth, big, pal, wd));
  }
}

#define DST_CASES(SF, SD, BIG)                                                                \
  switch (dfmt * 2 + (ddepth == 16)) {                                                        \
    case SPDL_PK_RGB * 2:                                                                     \
      convert_rows(src, src_stride, SF, SD, BIG, pal, dst, dst_stride, SPDL_PK_RGB, 8, h, w);   \
      return 0;                                                                               \
    case SPDL_PK_RGB * 2 + 1:                                                                 \
      convert_rows(src, src_stride, SF, SD, BIG, pal, dst, dst_stride, SPDL_PK_RGB, 16, h, w);  \
      return 0;                                                                               \
    case SPDL_PK_BGR * 2:                                                                     \
      convert_rows(src, src_stride, SF, SD, BIG, pal, dst, dst_stride, SPDL_PK_BGR, 8, h, w);   \
      return 0;                                                                               \
    case SPDL_PK_BGR * 2 + 1:                                                                 \
      convert_rows(src, src_stride, SF, SD, BIG, pal, dst, dst_stride, SPDL_PK_BGR, 16, h, w);  \
      return 0;                                                                               \
    case SPDL_PK_GRAY * 2:                                                                    \
      convert_rows(src, src_stride, SF, SD, BIG, pal, dst, dst_stride, SPDL_PK_GRAY, 8, h, w);  \
      return 0;                                                                               \
    case SPDL_PK_GRAY * 2 + 1:                                                                \
      convert_rows(src, src_stride, SF, SD, BIG, pal, dst, dst_stride, SPDL_PK_GRAY, 16, h, w); \
      return 0;                                                                               \
    case SPDL_PK_RGBA * 2:                                                                    \
      convert_rows(src, src_stride, SF, SD, BIG, pal, dst, dst_stride, SPDL_PK_RGBA, 8, h, w);  \
      return 0;                                                                               \
    case SPDL_PK_RGBA * 2 + 1:                                                                \
      convert_rows(src, src_stride, SF, SD, BIG, pal, dst, dst_stride, SPDL_PK_RGBA, 16, h, w); \
      return 0;                                                                               \
  }                                                                                           \
  return -1;

#define SRC_CASE(SF)                 \
  case SF:                           \
    if (sdepth == 8) {               \
      DST_CASES(SF, 8, 0)            \
    } else if (sbig) {               \
      DST_CASES(SF, 16, 1)           \
    } else {                         \
      DST_CASES(SF, 16, 0)           \
    }

int spdl_px_convert(const uint8_t *src, int64_t src_stride, int sfmt, int sdepth, int sbig,
                    const uint32_t *pal, uint8_t *dst, int64_t dst_stride, int dfmt, int ddepth,
                    int32_t h, int32_t w) {
  if ((sdepth != 8 && sdepth != 16) || (ddepth != 8 && ddepth != 16)) return -1;
  if (sfmt == SPDL_PK_PAL8 && (pal == NULL || sdepth != 8)) return -1;
  switch (sfmt) {
    SRC_CASE(SPDL_PK_RGB)
    SRC_CASE(SPDL_PK_BGR)
    SRC_CASE(SPDL_PK_RGBA)
    SRC_CASE(SPDL_PK_BGRA)
    SRC_CASE(SPDL_PK_ARGB)
    SRC_CASE(SPDL_PK_ABGR)
    SRC_CASE(SPDL_PK_GRAY)
    SRC_CASE(SPDL_PK_GRAYA)
    case SPDL_PK_PAL8:
      if (sdepth != 8) return -1;
      DST_CASES(SPDL_PK_PAL8, 8, 0)
  }
  return -1;
}

void spdl_px_widen(uint8_t *buf, int64_t stride, int32_t h, int64_t n) {
  for (int32_t y = 0; y < h; y++) {
    uint8_t *row = buf + (int64_t)y * stride;
    uint16_t *w = (uint16_t *)(void *)row;
    for (int64_t i = n - 1; i >= 0; i--) w[i] = (uint16_t)(row[i] * 257);
  }
}
