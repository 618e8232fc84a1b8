/*
 * tensor.h: spdl-go's reference-counted CPU tensor and its DLPack exchange.
 *
 * These functions are part of libspdl's C ABI: Python calls some of them
 * through ctypes. Every function is safe to call from any thread, and
 * concurrently, as long as the caller owns the references it passes.
 *
 * Ownership in one paragraph: a spdl_tensor* is a counted reference. Whoever
 * receives one from spdl_tensor_alloc, spdl_tensor_from_dlpack_* or
 * spdl_tensor_incref owns that reference and gives it back with exactly one
 * spdl_tensor_decref. spdl_tensor_to_dlpack_* hand out a new reference
 * wrapped in a DLPack struct; the struct's deleter gives it back.
 */
#ifndef SPDL_TENSOR_H_
#define SPDL_TENSOR_H_

#include <stdint.h>

#include "dlpack.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spdl_tensor spdl_tensor;

/* Allocates a contiguous, row-major CPU tensor of the given shape and
 * dtype ({code, bits, lanes} as in DLDataType; bits must be a positive
 * multiple of 8). The data is 64-byte aligned, comes from the buffer pool
 * and is NOT zeroed. Returns a new reference, or NULL if ndim or a dimension
 * is negative, the dtype is unsupported, the size overflows, or memory is
 * exhausted. shape is read, not kept. */
spdl_tensor* spdl_tensor_alloc(int32_t ndim, const int64_t* shape, uint8_t code,
                               uint8_t bits, uint16_t lanes);

/* Wraps a foreign DLPack tensor. On success the spdl_tensor owns m and
 * calls m->deleter(m) (if not NULL) when its last reference goes; the caller
 * must not touch m again. Returns NULL, and leaves m and its deleter to
 * the caller, if m is NULL, its major version is not 1, its device is not
 * kDLCPU, its ndim is negative, or memory is exhausted. The READ_ONLY flag
 * is kept and passed on by spdl_tensor_to_dlpack_versioned. */
spdl_tensor* spdl_tensor_from_dlpack_versioned(DLManagedTensorVersioned* m);

/* As spdl_tensor_from_dlpack_versioned, for the legacy struct (no version,
 * no flags). */
spdl_tensor* spdl_tensor_from_dlpack_legacy(DLManagedTensor* m);

/* Adds a reference. t must be a live reference the caller owns. */
void spdl_tensor_incref(spdl_tensor* t);

/* Drops a reference; the last one frees the tensor (data back to the pool,
 * or the foreign deleter called). NULL is ignored. */
void spdl_tensor_decref(spdl_tensor* t);

/* The tensor's view: CPU device, byte_offset 0, strides never NULL. Valid
 * while the caller holds a reference; the caller must not modify it. */
const DLTensor* spdl_tensor_dltensor(const spdl_tensor* t);

/* Returns a new DLPack 1.0 struct holding a new reference to t (t's own
 * reference stays with the caller). Its deleter drops that reference and
 * frees the struct; call it exactly once. flags has READ_ONLY set if t was
 * imported read-only. NULL if t is NULL or memory is exhausted. */
DLManagedTensorVersioned* spdl_tensor_to_dlpack_versioned(spdl_tensor* t);

/* As spdl_tensor_to_dlpack_versioned, for the legacy struct. */
DLManagedTensor* spdl_tensor_to_dlpack_legacy(spdl_tensor* t);

/* Memory statistics, read without locking (each value is exact, the four
 * together are not a snapshot):
 *   out[0] live spdl_tensor blocks (pooled and imported),
 *   out[1] bytes of pooled data buffers in use by live tensors,
 *   out[2] bytes cached in the pool's free lists,
 *   out[3] data buffers allocated from the system since start (pool misses;
 *          flat in a steady state means no per-batch allocation). */
void spdl_mem_stats(int64_t out[4]);

/* Sets how many bytes of free buffers the pool keeps (default 256 MiB;
 * negative means 0) and frees cached buffers above the new limit. */
void spdl_mem_set_pool_limit(int64_t bytes);

/* Frees every cached buffer. Buffers in use are not affected. */
void spdl_mem_trim(void);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* SPDL_TENSOR_H_ */
