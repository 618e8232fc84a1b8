/*
 * tensor.h: spdl-go's reference-counted tensors (CPU, pinned and CUDA
 * device memory) and their DLPack exchange.
 *
 * The package is compiled with -fvisibility=hidden: the functions marked
 * SPDL_TENSOR_ABI are part of libspdl's C ABI (capi/spdl.h declares them
 * again, and capi/bridge.c includes both headers so that the compiler checks
 * they agree); the others are for the Go package only. Every function is
 * safe to call from any thread, and concurrently, as long as the caller owns
 * the references it passes.
 *
 * Ownership in one paragraph: a spdl_tensor* is a counted reference. Whoever
 * receives one from spdl_tensor_alloc, spdl_tensor_from_dlpack_* or
 * spdl_tensor_incref owns that reference and gives it back with exactly one
 * spdl_tensor_decref. spdl_tensor_to_dlpack_* hand out a new reference
 * wrapped in a DLPack struct; the struct's deleter gives it back.
 */
#ifndef SPDL_TENSOR_H_
#define SPDL_TENSOR_H_

#include <stddef.h>
#include <stdint.h>

#include "dlpack.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPDL_TENSOR_ABI __attribute__((visibility("default")))

typedef struct spdl_tensor spdl_tensor;

/* Allocates a contiguous, row-major CPU tensor of the given shape and
 * dtype ({code, bits, lanes} as in DLDataType; bits must be a positive
 * multiple of 8). The data is 64-byte aligned, comes from the buffer pool
 * and is NOT zeroed. Returns a new reference, or NULL if ndim or a dimension
 * is negative, the dtype is unsupported, the size overflows, or memory is
 * exhausted. shape is read, not kept. */
SPDL_TENSOR_ABI spdl_tensor* spdl_tensor_alloc(int32_t ndim, const int64_t* shape, uint8_t code,
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
SPDL_TENSOR_ABI void spdl_tensor_incref(spdl_tensor* t);

/* Drops a reference; the last one frees the tensor (data back to the pool,
 * or the foreign deleter called). NULL is ignored. */
SPDL_TENSOR_ABI void spdl_tensor_decref(spdl_tensor* t);

/* The tensor's view: byte_offset 0, strides never NULL. Valid
 * while the caller holds a reference; the caller must not modify it. */
SPDL_TENSOR_ABI const DLTensor* spdl_tensor_dltensor(const spdl_tensor* t);

/* Returns a new DLPack 1.0 struct holding a new reference to t (t's own
 * reference stays with the caller). Its deleter drops that reference and
 * frees the struct; call it exactly once. flags has READ_ONLY set if t was
 * imported read-only. NULL if t is NULL or memory is exhausted. */
SPDL_TENSOR_ABI DLManagedTensorVersioned* spdl_tensor_to_dlpack_versioned(spdl_tensor* t);

/* As spdl_tensor_to_dlpack_versioned, for the legacy struct. */
SPDL_TENSOR_ABI DLManagedTensor* spdl_tensor_to_dlpack_legacy(spdl_tensor* t);

/* Memory statistics, read without locking (each value is exact, the four
 * together are not a snapshot; capi's spdl_mem_stats reports them as JSON):
 *   out[0] live spdl_tensor blocks (pooled and imported),
 *   out[1] bytes of pooled data buffers in use by live tensors,
 *   out[2] bytes cached in the pool's free lists,
 *   out[3] data buffers allocated from the system since start (pool misses;
 *          flat in a steady state means no per-batch allocation). */
void spdl_pool_stats(int64_t out[4]);

/* Sets how many bytes of free buffers the pool keeps (default 256 MiB;
 * negative means 0) and frees cached buffers above the new limit. */
SPDL_TENSOR_ABI void spdl_mem_set_pool_limit(int64_t bytes);

/* Frees every cached buffer. Buffers in use are not affected. */
SPDL_TENSOR_ABI void spdl_mem_trim(void);

/* Shared-memory arena (spdl_go's pipelines in a subprocess). The child
 * process calls spdl_shm_arena once, before its pipeline runs: from then on
 * pooled buffers come from the memfd fd (size bytes, mapped shared) while it
 * has room, and from malloc after. spdl_shm_lend marks t's buffer as lent to
 * the parent and stores the offsets of its header and of t's first element
 * in out; it returns 0 (and lends nothing) when t's buffer is not in the
 * arena. The child's pool reuses a lent buffer only after the parent's
 * tensor over it is gone. spdl_shm_arena returns 0 or an errno value.
 *
 * The parent maps the same memfd with spdl_shm_map (a handle, or NULL with
 * *err set to an errno value) and makes tensors over lent buffers with spdl_shm_tensor (a
 * new reference, or NULL if the offsets, shape or strides reach outside the
 * buffer); their last reference returns the buffer to the child. A mapping
 * lives until spdl_shm_unmap and every tensor over it are gone, so tensors
 * outlive the child.
 *
 * spdl_shm_stats: out[0] arena bytes (0: none), out[1] bytes carved from it,
 * out[2] buffers freed by the child but still lent, out[3] lends since
 * start, out[4] allocations that found the arena full. */
SPDL_TENSOR_ABI int spdl_shm_arena(int fd, int64_t size);
SPDL_TENSOR_ABI int spdl_shm_lend(spdl_tensor* t, int64_t* out);
SPDL_TENSOR_ABI void spdl_shm_stats(int64_t* out);
SPDL_TENSOR_ABI void* spdl_shm_map(int fd, int64_t size, int* err);
SPDL_TENSOR_ABI void spdl_shm_unmap(void* map);
SPDL_TENSOR_ABI spdl_tensor* spdl_shm_tensor(void* map, int64_t hdr_off, int64_t data_off, int32_t ndim,
                                             const int64_t* shape, const int64_t* strides, uint8_t code,
                                             uint8_t bits, uint16_t lanes);
/* The same as one message: spdl_shm_lend_desc lends t and writes its
 * descriptor (24 + 16 * ndim bytes: both offsets, ndim, dtype, dims and
 * strides) to out, returning its length; 0 when t's buffer is not in the
 * arena, -1 when cap is too small (nothing lent either way).
 * spdl_shm_tensor_desc makes the tensor from a descriptor of len bytes (NULL
 * when it is malformed or reaches outside its buffer). */
SPDL_TENSOR_ABI int32_t spdl_shm_lend_desc(spdl_tensor* t, uint8_t* out, int32_t cap);
SPDL_TENSOR_ABI spdl_tensor* spdl_shm_tensor_desc(void* map, const uint8_t* desc, int32_t len);

/* Arrow buffers in the arena (core/columnar's allocator, in a worker).
 * spdl_shm_buf_alloc carves n > 0 bytes, zeroed, as a tensor's buffer is
 * carved (*cap: its capacity); NULL when there is no arena or no room.
 * spdl_shm_buf_free gives one back (1), or says p is not in the arena (0);
 * a lent one is reused once the parent's view is gone.
 * spdl_shm_lend_buf lends the first len bytes of the buffer starting at p,
 * which the caller knows came from spdl_shm_buf_alloc, and writes the
 * descriptor of a 1-D uint8 tensor over them (as spdl_shm_lend_desc
 * does); 0 when p is not in the arena or len is past its capacity, -1
 * when cap is too small (nothing lent either way). Not exported: capi's
 * spdl_shm_lend_buffer checks p first. */
void* spdl_shm_buf_alloc(int64_t n, int64_t* cap);
int spdl_shm_buf_free(void* p);
int32_t spdl_shm_lend_buf(void* p, int64_t len, uint8_t* out, int32_t cap);

/* ---- CUDA memory -----------------------------------------------------------
 *
 * libspdl does not link CUDA. core/cuda loads the runtime at run time and
 * hands its functions over with spdl_cuda_set_api; until then the
 * functions below fail. Device and pinned buffers are pooled like CPU ones,
 * per device and size class, up to a byte limit each (default 1 GiB per
 * device and 256 MiB pinned).
 *
 * A device buffer may still be read by the consumer's GPU work when its
 * tensor is released (torch frees a tensor before the kernels that read it
 * have run). So the release records an event on the stream the consumer
 * named in __dlpack__(stream=...) (spdl_tensor_note_stream), and the next
 * allocation of that buffer makes the producer's stream wait for the event
 * before anything is written. A buffer noted on two different streams, or
 * whose event cannot be recorded, is freed with cudaFree instead, which
 * waits for the device. */

/* The CUDA runtime functions libspdl calls, as cudart declares them (the
 * cudaError_t results are ints; 0 is success). */
typedef struct {
  int (*host_alloc)(void** p, size_t n, unsigned int flags);
  int (*free_host)(void* p);
  int (*malloc)(void** p, size_t n);
  int (*free)(void* p);
  int (*event_create)(void** ev, unsigned int flags);
  int (*event_record)(void* ev, void* stream);
  int (*event_destroy)(void* ev);
  int (*stream_wait_event)(void* stream, void* ev, unsigned int flags);
  int (*event_synchronize)(void* ev);
} spdl_cuda_api;

/* Installs the runtime's functions (copied). The first call wins: a later
 * call with different functions returns -1 and changes nothing, since
 * buffers from the first runtime may be alive. Returns 0 on success. */
int spdl_cuda_set_api(const spdl_cuda_api* api);

/* Allocates a contiguous tensor in pinned (page-locked) host memory. Its
 * DLPack device is kDLCPU: the CPU reads it like any other memory, and
 * copies from it to a GPU are asynchronous. On failure returns NULL and
 * sets *cuda_err to the CUDA error, or to -1 if no runtime is installed or
 * the shape is invalid (NULL cuda_err is allowed). */
spdl_tensor* spdl_tensor_alloc_pinned(int32_t ndim, const int64_t* shape, uint8_t code,
                                      uint8_t bits, uint16_t lanes, int* cuda_err);

/* Allocates a contiguous tensor in the memory of CUDA device `device`
 * (DLPack kDLCUDA). The caller must be on that device (cudaSetDevice) and
 * will write the buffer only with work queued on `stream`: if the buffer
 * comes from the pool and its last consumer's work may still be pending,
 * `stream` is made to wait for it first. Errors as spdl_tensor_alloc_pinned. */
spdl_tensor* spdl_tensor_alloc_device(int32_t device, void* stream, int32_t ndim,
                                      const int64_t* shape, uint8_t code, uint8_t bits,
                                      uint16_t lanes, int* cuda_err);

/* Notes that a consumer will use t on CUDA stream `stream` (a cudaStream_t,
 * or 1 / 2 for the legacy / per-thread default stream, as DLPack numbers
 * them), or -1 for a stream it does not know. Called by __dlpack__ before
 * it exports a device tensor. A buffer noted with -1 or with two different
 * streams is freed with cudaFree, not reused. Does nothing for other
 * tensors. */
SPDL_TENSOR_ABI void spdl_tensor_note_stream(spdl_tensor* t, intptr_t stream);

/* CUDA memory statistics (capi's spdl_cuda_mem_stats reports them as JSON):
 *   out[0] bytes of pinned buffers in use,   out[1] pinned bytes cached,
 *   out[2] bytes of device buffers in use,   out[3] device bytes cached,
 *   out[4] buffers allocated from CUDA since start,
 *   out[5] buffers freed to CUDA since start,
 *   out[6] reuses that had to wait for a consumer's event. */
void spdl_cuda_pool_stats(int64_t out[7]);

/* Sets the cache limits (negative means 0) and frees what is above them. */
void spdl_cuda_set_pool_limits(int64_t pinned_bytes, int64_t device_bytes_per_device);

/* Frees every cached pinned and device buffer. */
SPDL_TENSOR_ABI void spdl_cuda_mem_trim(void);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* SPDL_TENSOR_H_ */
