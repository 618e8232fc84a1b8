// copy.c: strided copy with element-type conversion. See copy.h.

#include "copy.h"

#include <math.h>
#include <string.h>

// ---- half-precision bit conversions (round to nearest even) ---------------

static uint16_t f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mant = x & 0x7fffffu;
  int32_t exp = (int32_t)((x >> 23) & 0xffu);
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0));
  int32_t e = exp - 127 + 15;
  if (e >= 0x1f) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) {  // half subnormal: value = m * 2^-24
    if (e < -10) return (uint16_t)sign;
    mant |= 0x800000u;
    int shift = 14 - e;
    uint32_t m = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (m & 1u))) m++;
    return (uint16_t)(sign | m);
  }
  uint32_t h = sign | ((uint32_t)e << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;  // a carry rounds up to the next binade or to inf
  return (uint16_t)h;
}

static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
  if (e == 0) {
    float f = (float)m * 5.9604644775390625e-8f;  // m * 2^-24
    memcpy(&x, &f, 4);
    x |= sign;
  } else if (e == 31) {
    x = sign | 0x7f800000u | (m << 13);
  } else {
    x = sign | ((e - 15 + 127) << 23) | (m << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static uint16_t f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

static float bf16_to_f32(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

// ---- block conversion ------------------------------------------------------
//
// A converting copy moves runs of up to CHUNK elements through a buffer:
// int64 when both types are integers (so 64-bit values stay exact), double
// otherwise. Each load and store loop is typed, so the compiler can
// vectorize the contiguous case.

#define CHUNK 512

enum { T_BAD, T_INT, T_UINT, T_BOOL, T_FLOAT, T_HALF, T_BF16 };

// kind classifies a dtype; T_BAD for the ones we cannot convert.
static int kind(DLDataType t) {
  if (t.lanes != 1) return T_BAD;
  switch (t.code) {
    case kDLInt:
      return t.bits == 8 || t.bits == 16 || t.bits == 32 || t.bits == 64 ? T_INT : T_BAD;
    case kDLUInt:
      return t.bits == 8 || t.bits == 16 || t.bits == 32 || t.bits == 64 ? T_UINT : T_BAD;
    case kDLFloat:
      return t.bits == 16 ? T_HALF : t.bits == 32 || t.bits == 64 ? T_FLOAT : T_BAD;
    case kDLBfloat:
      return t.bits == 16 ? T_BF16 : T_BAD;
    case kDLBool:
      return t.bits == 8 ? T_BOOL : T_BAD;
  }
  return T_BAD;
}

static int is_float_kind(int k) { return k == T_FLOAT || k == T_HALF || k == T_BF16; }

// Float to integer: truncate toward zero, saturate to [lo, hi], NaN to 0
// (C leaves out-of-range casts undefined).
static inline int64_t f_to_int(double d, double lo, double hi, int64_t ilo, int64_t ihi) {
  if (isnan(d)) return 0;
  if (d <= lo) return ilo;
  if (d >= hi) return ihi;
  return (int64_t)d;
}

static inline uint64_t f_to_uint(double d, double hi, uint64_t ihi) {
  if (isnan(d) || d <= 0) return 0;
  if (d >= hi) return ihi;
  return (uint64_t)d;
}

// LOOP runs BODY for i in [0, n), with a separate copy for the contiguous
// case (step == sizeof(T)) so that the compiler sees unit strides.
#define LOOP(step, T, BODY)                                      \
  do {                                                           \
    if ((step) == (int64_t)sizeof(T)) {                          \
      for (int64_t i = 0; i < n; i++) { const int64_t off = i * (int64_t)sizeof(T); BODY; } \
    } else {                                                     \
      for (int64_t i = 0; i < n; i++) { const int64_t off = i * (step); BODY; } \
    }                                                            \
  } while (0)

#define LOAD(T, CONV) LOOP(ss, T, buf[i] = CONV(*(const T*)(s + off)))
#define STORE(T, CONV) LOOP(ds, T, *(T*)(d + off) = CONV(buf[i]))
#define ID(x) (x)

static void load_f(const char* s, int64_t ss, DLDataType t, int64_t n, double* buf) {
  switch (kind(t)) {
    case T_INT:
      switch (t.bits) {
        case 8: LOAD(int8_t, (double)); return;
        case 16: LOAD(int16_t, (double)); return;
        case 32: LOAD(int32_t, (double)); return;
        default: LOAD(int64_t, (double)); return;
      }
    case T_UINT:
      switch (t.bits) {
        case 8: LOAD(uint8_t, (double)); return;
        case 16: LOAD(uint16_t, (double)); return;
        case 32: LOAD(uint32_t, (double)); return;
        default: LOAD(uint64_t, (double)); return;
      }
    case T_BOOL: LOAD(uint8_t, 0.0 != ); return;
    case T_HALF: LOAD(uint16_t, (double)f16_to_f32); return;
    case T_BF16: LOAD(uint16_t, (double)bf16_to_f32); return;
    default:
      if (t.bits == 32) LOAD(float, (double)); else LOAD(double, ID);
      return;
  }
}

static void load_i(const char* s, int64_t ss, DLDataType t, int64_t n, int64_t* buf) {
  switch (kind(t)) {
    case T_INT:
      switch (t.bits) {
        case 8: LOAD(int8_t, (int64_t)); return;
        case 16: LOAD(int16_t, (int64_t)); return;
        case 32: LOAD(int32_t, (int64_t)); return;
        default: LOAD(int64_t, ID); return;
      }
    case T_UINT:
      switch (t.bits) {
        case 8: LOAD(uint8_t, (int64_t)); return;
        case 16: LOAD(uint16_t, (int64_t)); return;
        case 32: LOAD(uint32_t, (int64_t)); return;
        default: LOAD(uint64_t, (int64_t)); return;
      }
    default: LOAD(uint8_t, 0 != ); return;  // T_BOOL
  }
}

#define TO_I8(x) (int8_t)f_to_int(x, INT8_MIN, INT8_MAX, INT8_MIN, INT8_MAX)
#define TO_I16(x) (int16_t)f_to_int(x, INT16_MIN, INT16_MAX, INT16_MIN, INT16_MAX)
#define TO_I32(x) (int32_t)f_to_int(x, INT32_MIN, INT32_MAX, INT32_MIN, INT32_MAX)
#define TO_I64(x) f_to_int(x, (double)INT64_MIN, (double)INT64_MAX, INT64_MIN, INT64_MAX)
#define TO_U8(x) (uint8_t)f_to_uint(x, UINT8_MAX, UINT8_MAX)
#define TO_U16(x) (uint16_t)f_to_uint(x, UINT16_MAX, UINT16_MAX)
#define TO_U32(x) (uint32_t)f_to_uint(x, UINT32_MAX, UINT32_MAX)
#define TO_U64(x) f_to_uint(x, (double)UINT64_MAX, UINT64_MAX)
#define TO_F16(x) f32_to_f16((float)(x))
#define TO_BF16(x) f32_to_bf16((float)(x))

static void store_f(char* d, int64_t ds, DLDataType t, int64_t n, const double* buf) {
  switch (kind(t)) {
    case T_INT:
      switch (t.bits) {
        case 8: STORE(int8_t, TO_I8); return;
        case 16: STORE(int16_t, TO_I16); return;
        case 32: STORE(int32_t, TO_I32); return;
        default: STORE(int64_t, TO_I64); return;
      }
    case T_UINT:
      switch (t.bits) {
        case 8: STORE(uint8_t, TO_U8); return;
        case 16: STORE(uint16_t, TO_U16); return;
        case 32: STORE(uint32_t, TO_U32); return;
        default: STORE(uint64_t, TO_U64); return;
      }
    case T_BOOL: STORE(uint8_t, 0.0 != ); return;
    case T_HALF: STORE(uint16_t, TO_F16); return;
    case T_BF16: STORE(uint16_t, TO_BF16); return;
    default:
      if (t.bits == 32) STORE(float, (float)); else STORE(double, ID);
      return;
  }
}

static void store_i(char* d, int64_t ds, DLDataType t, int64_t n, const int64_t* buf) {
  switch (kind(t)) {
    case T_INT:
      switch (t.bits) {
        case 8: STORE(int8_t, (int8_t)); return;
        case 16: STORE(int16_t, (int16_t)); return;
        case 32: STORE(int32_t, (int32_t)); return;
        default: STORE(int64_t, ID); return;
      }
    case T_UINT:
      switch (t.bits) {
        case 8: STORE(uint8_t, (uint8_t)); return;
        case 16: STORE(uint16_t, (uint16_t)); return;
        case 32: STORE(uint32_t, (uint32_t)); return;
        default: STORE(uint64_t, (uint64_t)); return;
      }
    default: STORE(uint8_t, 0 != ); return;  // T_BOOL
  }
}

// convert_run converts n elements from s (byte step ss, type st) to d
// (byte step ds, type dt).
static void convert_run(char* d, int64_t ds, DLDataType dt, const char* s, int64_t ss,
                        DLDataType st, int64_t n, int via_float) {
  union {
    double f[CHUNK];
    int64_t i[CHUNK];
  } buf;
  while (n > 0) {
    int64_t k = n < CHUNK ? n : CHUNK;
    if (via_float) {
      load_f(s, ss, st, k, buf.f);
      store_f(d, ds, dt, k, buf.f);
    } else {
      load_i(s, ss, st, k, buf.i);
      store_i(d, ds, dt, k, buf.i);
    }
    s += k * ss;
    d += k * ds;
    n -= k;
  }
}

static int same_type(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

// ---- n-dimensional walk ----------------------------------------------------

int spdl_copy_nd(void* dst, const int64_t* dstr, DLDataType dt,
                 const void* src, const int64_t* sstr, DLDataType st,
                 const int64_t* shape, int32_t ndim) {
  if (ndim < 0 || ndim > SPDL_COPY_MAX_NDIM) return -1;
  int same = same_type(dt, st), via_float = 0;
  if (!same) {
    int sk = kind(st), dk = kind(dt);
    if (sk == T_BAD || dk == T_BAD) return -1;
    via_float = is_float_kind(sk) || is_float_kind(dk);
  }
  size_t dsz = ((size_t)dt.bits * dt.lanes + 7) / 8, ssz = ((size_t)st.bits * st.lanes + 7) / 8;

  // Drop size-1 dims and merge dims that are contiguous in both blocks, so
  // that a compact-to-compact copy is one memcpy.
  int64_t sh[SPDL_COPY_MAX_NDIM], ds[SPDL_COPY_MAX_NDIM], ss[SPDL_COPY_MAX_NDIM];
  int n = 0;
  for (int32_t i = 0; i < ndim; i++) {
    if (shape[i] == 0) return 0;
    if (shape[i] == 1) continue;
    if (n > 0 && ds[n - 1] == dstr[i] * shape[i] && ss[n - 1] == sstr[i] * shape[i]) {
      sh[n - 1] *= shape[i];
      ds[n - 1] = dstr[i];
      ss[n - 1] = sstr[i];
      continue;
    }
    sh[n] = shape[i];
    ds[n] = dstr[i];
    ss[n] = sstr[i];
    n++;
  }
  if (n == 0) {  // one element
    sh[0] = 1;
    ds[0] = ss[0] = 1;
    n = 1;
  }

  int64_t inner = sh[n - 1], dstep = ds[n - 1] * (int64_t)dsz, sstep = ss[n - 1] * (int64_t)ssz;
  int run = same && ds[n - 1] == 1 && ss[n - 1] == 1;
  int64_t idx[SPDL_COPY_MAX_NDIM] = {0};
  char* d = dst;
  const char* s = src;
  for (;;) {
    if (run) {
      memcpy(d, s, (size_t)inner * dsz);
    } else if (same) {
      char* dp = d;
      const char* sp = s;
      for (int64_t j = 0; j < inner; j++, dp += dstep, sp += sstep) memcpy(dp, sp, dsz);
    } else {
      convert_run(d, dstep, dt, s, sstep, st, inner, via_float);
    }
    // Advance the outer index like an odometer.
    int k = n - 2;
    for (; k >= 0; k--) {
      d += ds[k] * (int64_t)dsz;
      s += ss[k] * (int64_t)ssz;
      if (++idx[k] < sh[k]) break;
      d -= ds[k] * sh[k] * (int64_t)dsz;
      s -= ss[k] * sh[k] * (int64_t)ssz;
      idx[k] = 0;
    }
    if (k < 0) return 0;
  }
}

int spdl_fill_nd(void* dst, const int64_t* dstr, DLDataType dt,
                 const int64_t* shape, int32_t ndim, double v) {
  static const int64_t zeros[SPDL_COPY_MAX_NDIM];
  if (ndim < 0 || ndim > SPDL_COPY_MAX_NDIM || kind(dt) == T_BAD) return -1;
  uint64_t elem = 0;  // dt's itemsize is at most 8 here
  store_f((char*)&elem, 0, dt, 1, &v);
  size_t sz = dt.bits / 8;
  // A compact block is filled by doubling memcpys; others element by element.
  int64_t count = 1, expect = 1;
  int compact = 1;
  for (int32_t i = ndim - 1; i >= 0; i--) {
    if (shape[i] == 0) return 0;
    if (shape[i] != 1 && dstr[i] != expect) compact = 0;
    expect *= shape[i];
    count *= shape[i];
  }
  if (!compact) return spdl_copy_nd(dst, dstr, dt, &elem, zeros, dt, shape, ndim);
  size_t total = (size_t)count * sz, done = sz;
  memcpy(dst, &elem, sz);
  while (done < total) {
    size_t k = done < total - done ? done : total - done;
    memcpy((char*)dst + done, dst, k);
    done += k;
  }
  return 0;
}
