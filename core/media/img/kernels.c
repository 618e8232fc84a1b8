// Pixel kernels; see kernels.h. Written as plain loops over contiguous
// memory with fixed channel and tap counts so that gcc -O3 vectorises
// them; on x86-64 Linux (gcc) the entry points are also compiled for
// x86-64-v3 (AVX2, FMA) and picked at load time (target_clones), so one
// binary runs on any x86-64 CPU.

#include "kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define SPDL_MULTIVERSION __attribute__((target_clones("arch=x86-64-v3", "default")))
#elif defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
// GCC 10 (Debian 11: the manylinux wheel's build root) has no x86-64-v3,
// and each of its clones adds one extension: AVX2, without FMA.
#define SPDL_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define SPDL_MULTIVERSION
#endif

#define Q 14  // weight fraction bits: 1.0 == 16384

// ---- coefficient tables ---------------------------------------------------

typedef struct {
  int32_t taps;    // weights per output (zero-padded)
  int32_t *start;  // per output: first source index read (later: element offset)
  int16_t *coef;   // per output: taps Q14 weights summing to 1 << Q
} coeffs;

static void free_coeffs(coeffs *co) {
  free(co->start);
  free(co->coef);
  co->start = NULL;
  co->coef = NULL;
}

static double filter_triangle(double x) {
  x = fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

static double filter_box(double x) { return (x > -0.5 && x <= 0.5) ? 1.0 : 0.0; }

// make_coeffs follows Pillow's precompute_coeffs (antialiased: the filter
// widens by the scale factor when shrinking), with the source window
// clamped to the axis's crop, fixed-point weights whose sum is exact, and
// one tap count for all outputs (the most non-zero weights any output has;
// shorter ones are zero-padded) so the inner loops have no ragged ends.
static int make_coeffs(int32_t in_size, spdl_axis a, int filter, int flip, coeffs *co) {
  int32_t n = a.out_len;
  double scale = a.src_len / (double)a.out_full;
  int32_t lo = (int32_t)floor(a.src_off), hi = (int32_t)ceil(a.src_off + a.src_len);
  if (lo < 0) lo = 0;
  if (hi > in_size) hi = in_size;
  if (lo >= in_size) lo = in_size - 1;
  if (hi <= lo) hi = lo + 1;
  int32_t avail = hi - lo;

  double fscale = 1.0, support = 0.5;
  int32_t ub = 1;  // most taps any output can have
  if (filter != SPDL_FILTER_NEAREST) {
    fscale = scale > 1.0 ? scale : 1.0;
    support = (filter == SPDL_FILTER_BILINEAR ? 1.0 : 0.5) * fscale;
    ub = (int32_t)ceil(support) * 2 + 1;
    if (ub > avail) ub = avail;
  }
  // Pass 1: weights per output in a ub-wide scratch, trimmed of zeros.
  int32_t *first = malloc((size_t)n * sizeof(int32_t));
  int16_t *scratch = calloc((size_t)n * (size_t)ub, sizeof(int16_t));
  double *w = malloc((size_t)ub * sizeof(double));
  co->start = malloc((size_t)n * sizeof(int32_t));
  co->coef = NULL;
  if (first == NULL || scratch == NULL || w == NULL || co->start == NULL) goto oom;
  double (*f)(double) = filter == SPDL_FILTER_AREA ? filter_box : filter_triangle;
  int32_t taps = 1;
  for (int32_t i = 0; i < n; i++) {
    int32_t oi = flip ? n - 1 - i : i;
    double center = a.src_off + ((double)a.out_off + oi + 0.5) * scale;
    int16_t *q = scratch + (size_t)i * ub;
    int32_t nearest = (int32_t)floor(center);
    if (nearest < lo) nearest = lo;
    if (nearest > hi - 1) nearest = hi - 1;
    if (filter == SPDL_FILTER_NEAREST) {
      first[i] = nearest;
      co->start[i] = 1;  // count, for now
      q[0] = 1 << Q;
      continue;
    }
    int32_t xmin = (int32_t)floor(center - support + 0.5);
    int32_t xmax = (int32_t)floor(center + support + 0.5);
    if (xmin < lo) xmin = lo;
    if (xmax > hi) xmax = hi;
    if (xmax - xmin > ub) xmax = xmin + ub;
    if (xmax <= xmin) {
      xmin = nearest;
      xmax = nearest + 1;
    }
    int32_t cnt = xmax - xmin;
    double sum = 0;
    for (int32_t k = 0; k < cnt; k++) {
      w[k] = f(((double)(xmin + k) - center + 0.5) / fscale);
      sum += w[k];
    }
    if (sum <= 0) {  // the window missed every tap: take the nearest pixel
      for (int32_t k = 0; k < cnt; k++) w[k] = 0;
      int32_t k = nearest - xmin;
      w[k < 0 ? 0 : (k >= cnt ? cnt - 1 : k)] = 1;
      sum = 1;
    }
    int32_t total = 0, big = 0;
    for (int32_t k = 0; k < cnt; k++) {
      int32_t v = (int32_t)lrint(w[k] / sum * (1 << Q));
      q[k] = (int16_t)v;
      total += v;
      if (v > q[big]) big = k;
    }
    q[big] = (int16_t)(q[big] + ((1 << Q) - total));
    int32_t b = 0, e = cnt;  // trim zero weights at both ends
    while (b < e - 1 && q[b] == 0) b++;
    while (e > b + 1 && q[e - 1] == 0) e--;
    if (b > 0) memmove(q, q + b, (size_t)(e - b) * sizeof(int16_t));
    for (int32_t k = e - b; k < cnt; k++) q[k] = 0;
    first[i] = xmin + b;
    co->start[i] = e - b;
    if (e - b > taps) taps = e - b;
  }
  // Pass 2: the final taps-wide table.
  co->taps = taps;
  co->coef = calloc((size_t)n * (size_t)taps, sizeof(int16_t));
  if (co->coef == NULL) goto oom;
  for (int32_t i = 0; i < n; i++) {
    int32_t cnt = co->start[i], s = first[i];
    if (s + taps > hi) s = hi - taps;  // >= lo since taps <= avail
    memcpy(co->coef + (size_t)i * taps + (first[i] - s), scratch + (size_t)i * ub,
           (size_t)cnt * sizeof(int16_t));
    co->start[i] = s;
  }
  free(first);
  free(scratch);
  free(w);
  return 0;
oom:
  free(first);
  free(scratch);
  free(w);
  free_coeffs(co);
  return -1;
}

// ---- resize ---------------------------------------------------------------

// vpass_t: out[i] = sum_k w[k] * s[k*stride + i] for n bytes, as float.
// The sum is exact in int32 (Q14); scaling by 2^-14 is exact in float.
// taps is a compile-time constant in the copies vpass makes, so the tap
// loop unrolls and the i loop vectorises with the sums in registers.
static inline void vpass_t(const uint8_t *restrict s, int64_t stride, const int32_t taps,
                           const int16_t *restrict w, float *restrict out, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    int32_t acc = 0;
    for (int32_t k = 0; k < taps; k++) acc += (int16_t)s[k * stride + i] * w[k];
    out[i] = (float)acc * (1.0f / (1 << Q));
  }
}

static inline void vpass(const uint8_t *s, int64_t stride, int32_t taps, const int16_t *w,
                         float *out, int64_t n) {
  switch (taps) {
#define TAPS(k)                          \
  case k:                                \
    vpass_t(s, stride, k, w, out, n);    \
    return;
    TAPS(1) TAPS(2) TAPS(3) TAPS(4) TAPS(5) TAPS(6) TAPS(7) TAPS(8) TAPS(9)
#undef TAPS
    default:
      vpass_t(s, stride, taps, w, out, n);
  }
}

// The horizontal pass works on one pixel (up to 4 channels) per vector:
// each tap is one unaligned 4-float load and one multiply-add. For 3
// channels the load reads one float past the pixel (the next pixel's
// first channel, or the row's zeroed slack), whose lane is dropped.
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f load4(const float *p) {
  v4f v;
  memcpy(&v, p, sizeof v);
  return v;
}

// round_clamp4 rounds half up and clamps to [0, 255]. (Weights are
// non-negative, so acc stays within about [0, 255] and the conversion is
// defined.)
static inline v4i round_clamp4(v4f acc) {
  const v4f half = {0.5f, 0.5f, 0.5f, 0.5f};
  const v4i top = {255, 255, 255, 255};
  v4i v = __builtin_convertvector(acc + half, v4i);  // truncates toward zero
  v &= ~(v < 0);
  v4i over = v > top;
  return (v & ~over) | (top & over);
}

// put4px rounds, clamps and stores four pixels (the first c lanes of each
// accumulator). On x86 the two saturating packs clamp for free.
static inline void put4px(uint8_t *d, v4f a0, v4f a1, v4f a2, v4f a3, const int c) {
#if defined(__SSE2__)
  const __m128 half = _mm_set1_ps(0.5f);  // + truncation: rounds half up
  __m128i i0 = _mm_cvttps_epi32(_mm_add_ps((__m128)a0, half));
  __m128i i1 = _mm_cvttps_epi32(_mm_add_ps((__m128)a1, half));
  __m128i i2 = _mm_cvttps_epi32(_mm_add_ps((__m128)a2, half));
  __m128i i3 = _mm_cvttps_epi32(_mm_add_ps((__m128)a3, half));
  __m128i b = _mm_packus_epi16(_mm_packs_epi32(i0, i1), _mm_packs_epi32(i2, i3));
  if (c == 4) {
    _mm_storeu_si128((__m128i *)d, b);
    return;
  }
  // Three channels: overlapping 4-byte stores, the last one 3 bytes.
  uint32_t p0 = (uint32_t)_mm_cvtsi128_si32(b), p1 = (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(b, 4));
  uint32_t p2 = (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(b, 8)), p3 = (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(b, 12));
  memcpy(d, &p0, 4);
  memcpy(d + 3, &p1, 4);
  memcpy(d + 6, &p2, 4);
  memcpy(d + 9, &p3, 3);
#else
  v4i v0 = round_clamp4(a0), v1 = round_clamp4(a1), v2 = round_clamp4(a2), v3 = round_clamp4(a3);
  for (int ch = 0; ch < c; ch++) {
    d[ch] = (uint8_t)v0[ch];
    d[c + ch] = (uint8_t)v1[ch];
    d[2 * c + ch] = (uint8_t)v2[ch];
    d[3 * c + ch] = (uint8_t)v3[ch];
  }
#endif
}

static inline void put1px(uint8_t *d, v4f acc, const int c) {
  v4i v = round_clamp4(acc);
  for (int ch = 0; ch < c; ch++) d[ch] = (uint8_t)v[ch];
}

// hpass_c computes n output pixels of c (3 or 4) channels, four at a time
// so that four independent multiply-add chains hide the adder latency.
// taps is a compile-time constant in the specialisations below.
static inline void hpass_c(const float *restrict t, const int32_t *restrict off,
                           const float *restrict coef, const int32_t taps, uint8_t *restrict d,
                           int32_t n, const int c) {
  int32_t x = 0;
  for (; x + 4 <= n; x += 4) {
    const float *p0 = t + off[x], *p1 = t + off[x + 1], *p2 = t + off[x + 2], *p3 = t + off[x + 3];
    const float *w0 = coef + (int64_t)x * taps, *w1 = w0 + taps, *w2 = w1 + taps, *w3 = w2 + taps;
    v4f a0 = {0, 0, 0, 0}, a1 = a0, a2 = a0, a3 = a0;
    for (int32_t k = 0; k < taps; k++) {
      a0 += w0[k] * load4(p0 + c * k);
      a1 += w1[k] * load4(p1 + c * k);
      a2 += w2[k] * load4(p2 + c * k);
      a3 += w3[k] * load4(p3 + c * k);
    }
    put4px(d + (int64_t)x * c, a0, a1, a2, a3, c);
  }
  for (; x < n; x++) {
    const float *p = t + off[x];
    const float *w = coef + (int64_t)x * taps;
    v4f acc = {0, 0, 0, 0};
    for (int32_t k = 0; k < taps; k++) acc += w[k] * load4(p + c * k);
    put1px(d + (int64_t)x * c, acc, c);
  }
}

// hpass dispatches to a copy of hpass_c with the tap count fixed, so the
// tap loop unrolls completely (bilinear needs 3 taps up to 2x shrinking,
// 5 up to 4x...).
static inline void hpass(const float *t, const int32_t *off, const float *coef, int32_t taps,
                         uint8_t *d, int32_t n, const int c) {
  switch (taps) {
#define TAPS(k)                              \
  case k:                                    \
    hpass_c(t, off, coef, k, d, n, c);       \
    return;
    TAPS(1) TAPS(2) TAPS(3) TAPS(4) TAPS(5) TAPS(6) TAPS(7) TAPS(8) TAPS(9)
#undef TAPS
    default:
      hpass_c(t, off, coef, taps, d, n, c);
  }
}

static inline void hpass_any(const float *t, const int32_t *off, const float *coef, int32_t taps,
                             uint8_t *d, int32_t n, int32_t c) {
  for (int32_t x = 0; x < n; x++) {
    const float *p = t + off[x];
    const float *w = coef + (int64_t)x * taps;
    for (int32_t ch = 0; ch < c; ch++) {
      float acc = 0.5f;
      for (int32_t k = 0; k < taps; k++) acc += w[k] * p[k * c + ch];
      d[x * c + ch] = acc <= 0 ? 0 : (acc >= 255 ? 255 : (uint8_t)acc);
    }
  }
}

SPDL_MULTIVERSION
int spdl_resize_u8(const uint8_t *src, int32_t sh, int32_t sw, int32_t c, int64_t src_stride,
                   uint8_t *dst, int64_t dst_stride, spdl_axis ay, spdl_axis ax, int filter,
                   int flip_x) {
  coeffs cy = {0}, cx = {0};
  if (make_coeffs(sh, ay, filter, 0, &cy) != 0) return -1;
  if (make_coeffs(sw, ax, filter, flip_x, &cx) != 0) {
    free_coeffs(&cy);
    return -1;
  }
  // The horizontal pass reads source columns [xlo, xhi).
  int32_t xlo = sw, xhi = 0;
  for (int32_t x = 0; x < ax.out_len; x++) {
    if (cx.start[x] < xlo) xlo = cx.start[x];
    if (cx.start[x] + cx.taps > xhi) xhi = cx.start[x] + cx.taps;
  }
  for (int32_t x = 0; x < ax.out_len; x++) cx.start[x] = (cx.start[x] - xlo) * c;
  int64_t n = (int64_t)(xhi - xlo) * c, nw = (int64_t)ax.out_len * cx.taps;
  float *row = calloc((size_t)n + 4, sizeof(float));  // + slack for 4-float loads
  float *wx = malloc((size_t)nw * sizeof(float));
  if (row == NULL || wx == NULL) {
    free(row);
    free(wx);
    free_coeffs(&cy);
    free_coeffs(&cx);
    return -1;
  }
  for (int64_t i = 0; i < nw; i++) wx[i] = (float)cx.coef[i] * (1.0f / (1 << Q));
  for (int32_t y = 0; y < ay.out_len; y++) {
    const uint8_t *s = src + (int64_t)cy.start[y] * src_stride + (int64_t)xlo * c;
    vpass(s, src_stride, cy.taps, cy.coef + (int64_t)y * cy.taps, row, n);
    uint8_t *d = dst + (int64_t)y * dst_stride;
    switch (c) {
      case 3:
        hpass(row, cx.start, wx, cx.taps, d, ax.out_len, 3);
        break;
      case 4:
        hpass(row, cx.start, wx, cx.taps, d, ax.out_len, 4);
        break;
      default:
        hpass_any(row, cx.start, wx, cx.taps, d, ax.out_len, c);
    }
  }
  free(row);
  free(wx);
  free_coeffs(&cy);
  free_coeffs(&cx);
  return 0;
}

// ---- flips, normalisation, pixel layouts -------------------------------------

SPDL_MULTIVERSION
void spdl_hflip_u8(const uint8_t *src, uint8_t *dst, int32_t h, int32_t w, int32_t c) {
  int64_t row = (int64_t)w * c;
  for (int32_t y = 0; y < h; y++) {
    const uint8_t *s = src + y * row;
    uint8_t *restrict d = dst + y * row;
    if (c == 3) {
      for (int32_t x = 0; x < w; x++) {
        const uint8_t *p = s + (int64_t)(w - 1 - x) * 3;
        d[x * 3] = p[0];
        d[x * 3 + 1] = p[1];
        d[x * 3 + 2] = p[2];
      }
    } else if (c == 1) {
      for (int32_t x = 0; x < w; x++) d[x] = s[w - 1 - x];
    } else {
      for (int32_t x = 0; x < w; x++) memcpy(d + (int64_t)x * c, s + (int64_t)(w - 1 - x) * c, (size_t)c);
    }
  }
}

SPDL_MULTIVERSION
void spdl_normalize_u8(const uint8_t *src, float *dst, int64_t pixels, int32_t c,
                       const float *lut, int chw) {
  if (chw && c == 3) {
    float *restrict d0 = dst, *restrict d1 = dst + pixels, *restrict d2 = dst + 2 * pixels;
    const float *l0 = lut, *l1 = lut + 256, *l2 = lut + 512;
    for (int64_t i = 0; i < pixels; i++) {
      d0[i] = l0[src[3 * i]];
      d1[i] = l1[src[3 * i + 1]];
      d2[i] = l2[src[3 * i + 2]];
    }
  } else if (chw) {
    for (int32_t ch = 0; ch < c; ch++) {
      float *restrict d = dst + ch * pixels;
      const float *l = lut + ch * 256;
      for (int64_t i = 0; i < pixels; i++) d[i] = l[src[i * c + ch]];
    }
  } else {
    for (int64_t i = 0; i < pixels; i++)
      for (int32_t ch = 0; ch < c; ch++) dst[i * c + ch] = lut[ch * 256 + src[i * c + ch]];
  }
}

static inline uint8_t luma(uint32_t r, uint32_t g, uint32_t b) {
  return (uint8_t)((19595 * r + 38470 * g + 7471 * b + 32768) >> 16);
}

static inline void put(uint8_t *d, int dfmt, uint8_t r, uint8_t g, uint8_t b) {
  switch (dfmt) {
    case SPDL_PK_RGB:
      d[0] = r, d[1] = g, d[2] = b;
      break;
    case SPDL_PK_BGR:
      d[0] = b, d[1] = g, d[2] = r;
      break;
    default:
      d[0] = luma(r, g, b);
  }
}

int spdl_convert_packed(const uint8_t *src, int64_t src_stride, int sfmt, const uint32_t *pal,
                        uint8_t *dst, int64_t dst_stride, int dfmt, int32_t h, int32_t w) {
  int dc = dfmt == SPDL_PK_GRAY ? 1 : 3;
  if (dfmt != SPDL_PK_RGB && dfmt != SPDL_PK_BGR && dfmt != SPDL_PK_GRAY) return -1;
  if (sfmt == SPDL_PK_PAL8 && pal == NULL) return -1;
  for (int32_t y = 0; y < h; y++) {
    const uint8_t *s = src + y * src_stride;
    uint8_t *d = dst + y * dst_stride;
    switch (sfmt) {
      case SPDL_PK_RGB:
        if (dfmt == SPDL_PK_RGB) {
          memcpy(d, s, (size_t)w * 3);
          break;
        }
        for (int32_t x = 0; x < w; x++) put(d + x * dc, dfmt, s[3 * x], s[3 * x + 1], s[3 * x + 2]);
        break;
      case SPDL_PK_BGR:
        if (dfmt == SPDL_PK_BGR) {
          memcpy(d, s, (size_t)w * 3);
          break;
        }
        for (int32_t x = 0; x < w; x++) put(d + x * dc, dfmt, s[3 * x + 2], s[3 * x + 1], s[3 * x]);
        break;
      case SPDL_PK_RGBA:
        for (int32_t x = 0; x < w; x++) put(d + x * dc, dfmt, s[4 * x], s[4 * x + 1], s[4 * x + 2]);
        break;
      case SPDL_PK_BGRA:
        for (int32_t x = 0; x < w; x++) put(d + x * dc, dfmt, s[4 * x + 2], s[4 * x + 1], s[4 * x]);
        break;
      case SPDL_PK_ARGB:
        for (int32_t x = 0; x < w; x++) put(d + x * dc, dfmt, s[4 * x + 1], s[4 * x + 2], s[4 * x + 3]);
        break;
      case SPDL_PK_ABGR:
        for (int32_t x = 0; x < w; x++) put(d + x * dc, dfmt, s[4 * x + 3], s[4 * x + 2], s[4 * x + 1]);
        break;
      case SPDL_PK_GRAY:
      case SPDL_PK_GRAYA: {
        int sc = sfmt == SPDL_PK_GRAY ? 1 : 2;
        for (int32_t x = 0; x < w; x++) {
          uint8_t v = s[sc * x];
          if (dc == 1) {
            d[x] = v;
          } else {
            d[3 * x] = v, d[3 * x + 1] = v, d[3 * x + 2] = v;
          }
        }
        break;
      }
      case SPDL_PK_PAL8:
        for (int32_t x = 0; x < w; x++) {
          uint32_t p = pal[s[x]];
          put(d + x * dc, dfmt, (uint8_t)(p >> 16), (uint8_t)(p >> 8), (uint8_t)p);
        }
        break;
      default:
        return -1;
    }
  }
  return 0;
}
