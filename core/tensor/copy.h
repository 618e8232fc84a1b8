// copy.h: element copy and conversion kernels behind Tensor.Convert,
// CopyInto and Fill. Internal to the Go package (hidden visibility: not
// part of libspdl's C ABI).
#ifndef SPDL_COPY_H_
#define SPDL_COPY_H_

#include <stdint.h>

#include "dlpack.h"

#define SPDL_COPY_MAX_NDIM 64

#define SPDL_HIDDEN __attribute__((visibility("hidden")))

// spdl_copy_nd copies the shape-sized block at src (strides in elements,
// element type st) to dst (strides dstr, element type dt), converting
// element types like numpy's astype: integers wrap modulo 2^bits; floats
// to integers truncate toward zero and saturate to the target's range (NaN
// becomes 0); anything nonzero is true. src and dst must
// not overlap. Returns 0, or -1 if a dtype is not one of bool, int8..64,
// uint8..64, float16/32/64, bfloat16 (with lanes 1) when a conversion is
// needed, or ndim exceeds SPDL_COPY_MAX_NDIM.
SPDL_HIDDEN int spdl_copy_nd(void* dst, const int64_t* dstr, DLDataType dt,
                             const void* src, const int64_t* sstr, DLDataType st,
                             const int64_t* shape, int32_t ndim);

// spdl_fill_nd sets every element of the block at dst to v converted to dt.
// Same return values as spdl_copy_nd.
SPDL_HIDDEN int spdl_fill_nd(void* dst, const int64_t* dstr, DLDataType dt,
                             const int64_t* shape, int32_t ndim, double v);

// spdl_tensor_read_only reports whether t was imported read-only
// (defined in tensor.c).
struct spdl_tensor;
SPDL_HIDDEN int spdl_tensor_read_only(const struct spdl_tensor* t);

#endif  // SPDL_COPY_H_
