/* spdl.h: the C ABI of libspdl.so, the spdl-go data-loading engine.
 *
 * This is the one header of the ABI: the library is compiled against it
 * (the cgo preambles and bridge.c include it, so the compiler checks every
 * definition against its declaration here), it is shipped next to
 * libspdl.so, and libspdl.so exports exactly the functions declared here
 * (capi/libspdl.map; python/tests/test_abi.py compares `nm -D` with this
 * header and with the ctypes signatures in python/spdl_go/_lib.py). It
 * includes dlpack.h, shipped next to it.
 *
 * Built with `make build` (or the wheel's build), which runs
 *   go build -buildmode=c-shared \
 *     -ldflags=-extldflags=-Wl,--version-script=$PWD/capi/libspdl.map ./capi
 * Every function may be called from any thread. None keeps a pointer the
 * caller passed in after it returns.
 *
 * Return codes (int):
 *   SPDL_OK       0   success; for spdl_pipeline_next, *out holds one item
 *   SPDL_END      1   spdl_pipeline_next: the epoch has ended; start another
 *   SPDL_TIMEOUT  2   spdl_pipeline_next: nothing arrived within the timeout
 *   SPDL_MESSAGE  3   spdl_pipeline_serve: *out holds a message from the peer
 *   SPDL_PEER     4   spdl_pipeline_serve: the socket to the peer failed or
 *                     closed; *err says how
 *   SPDL_ERROR   -1   failure; *err (when err is not NULL) is set to a
 *                     malloc'd UTF-8 message the caller frees with spdl_free
 *   SPDL_INVALID -2   spdl_io_*: the request or its options are invalid
 *                     (as SPDL_ERROR, with a message); the input was not tried
 *
 * Functions that answer with JSON have the shape
 *   int f(..., char **out_json, char **err)
 * SPDL_OK: *out_json is a malloc'd NUL-terminated UTF-8 JSON text, owned by
 * the caller; SPDL_ERROR: *out_json is untouched and *err is set.
 *
 * Memory: every char* and spdl_buf.data this library hands out was
 * allocated with malloc and is freed by the caller with spdl_free. Items
 * travel in the wire format documented in core/wire/wire.go; the
 * references inside an item (tensors, Arrow arrays, Python object ids)
 * belong to whoever receives the bytes.
 *
 * A Go panic never crosses this boundary: it becomes SPDL_ERROR with a
 * message that says it is an internal error.
 */
#ifndef SPDL_H
#define SPDL_H

#include <stddef.h>
#include <stdint.h>

#include "dlpack.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPDL_OK 0
#define SPDL_END 1
#define SPDL_TIMEOUT 2
#define SPDL_MESSAGE 3
#define SPDL_PEER 4
#define SPDL_ERROR (-1)
#define SPDL_INVALID (-2)

/* A malloc'd byte buffer. Ownership is stated at each use. */
typedef struct spdl_buf {
  uint8_t *data;
  size_t len;
} spdl_buf;

/* Callbacks into the host language (Python), installed once by spdl_init.
 * They are called from Go threads, concurrently; a host that needs a lock
 * (the GIL) takes it inside the callback.
 *
 * spdl_call_fn: run callable `fn_id` on the wire-encoded argument `in`
 *   (borrowed for the call). On success return 0 and fill *out with the
 *   encoded result; on failure return -1 and fill *out with a UTF-8 error
 *   message (a traceback). Fill *out with spdl_buf_set; Go frees it.
 *   Return 2 (out untouched) to pass nothing on for this input, or 3 with
 *   *out = an 8-byte little-endian stream id to pass on each value the
 *   stream yields: Go pulls them with spdl_next_fn(stream id).
 *   With in == NULL and in_len == 0 (no wire value is empty), the input of
 *   an aggregator stage ("flush": true in its op spec) has ended: run its
 *   flush, answering as for a call.
 * spdl_next_fn: advance source (or stream) `src_id`: 0 and *out = encoded
 *   item, 1 at the end (out untouched), -1 and *out = error message.
 * spdl_release_fn: Go dropped its reference to registry object `obj_id`;
 *   with the top bit set, to stream `obj_id` without it.
 */
typedef int (*spdl_call_fn)(uint64_t fn_id, const uint8_t *in, size_t in_len, spdl_buf *out);
typedef int (*spdl_next_fn)(uint64_t src_id, spdl_buf *out);
typedef void (*spdl_release_fn)(uint64_t obj_id);

/* Installs the callbacks (any may be NULL if the host never uses Python
 * stages or sources). Call once, before building pipelines that use them. */
int spdl_init(spdl_call_fn call, spdl_next_fn next, spdl_release_fn release, char **err);

/* Copies n bytes into a fresh malloc'd buffer stored in *out (for callbacks). */
void spdl_buf_set(spdl_buf *out, const void *data, size_t n);

/* Frees anything this library handed out (strings, spdl_buf.data). NULL is fine. */
void spdl_free(void *p);

/* The library version, e.g. "0.1.0"; static, do not free. */
const char *spdl_version(void);

/* Names of the native ops as a JSON array of strings; caller frees *out_json. */
int spdl_ops(char **out_json, char **err);

/* Describes media without decoding it: container format, duration, and per
 * stream codec, size, frame rate, frame count, sample rate, channels. With
 * data == NULL, path is opened; otherwise the data_len bytes at data are
 * read (copied) and path, which may be NULL, only names them in errors.
 * *out_json is the description as JSON; caller frees it. */
int spdl_probe(const char *path, const void *data, size_t data_len, char **out_json, char **err);

/* spdl_sampler_call: a request about sampler progress, as JSON (see
 * capi/sampler.go): {"op": "state", ...} turns the dataset indices one rank
 * consumed into its rank state; {"op": "merge", ...} turns every rank's
 * state into the epoch's progress. *out_json is the answer; caller frees it
 * with spdl_free. SPDL_ERROR names what is wrong with the request. */
int spdl_sampler_call(const char *req_json, size_t req_len, char **out_json, char **err);

/* spdl_spec_check: checks one part of a pipeline spec, the spec_len bytes
 * of JSON at spec_json (not NUL-terminated; copied), with the code that
 * reads it for spdl_pipeline_new, so a host can refuse an argument when it
 * is given. part (NUL-terminated) is
 *   "stage":    one stage of the spec's "stages" (its op is not built),
 *   "pipeline": some or all of the pipeline's settings (buffer_size,
 *               queue_size, max_failures, num_threads, cpu_budget),
 *   "sampling": the "sampling" group of a sampled source's options.
 * The schema is documented in capi/spec.go. SPDL_OK: the part is valid.
 * SPDL_ERROR: *err names the argument that is wrong in the words of the
 * Python builder ("pipe: concurrency must be an int >= 1 or 'auto', got 0"). */
int spdl_spec_check(const char *part, const char *spec_json, size_t spec_len, char **err);

/* spdl_cuda_status: loads the CUDA runtime (libcudart) at run time, trying
 * the paths in paths_json (a JSON list; may be NULL), then $SPDL_GO_CUDART,
 * then the linker's search path, and reports as JSON (caller frees):
 * {"available", "path", "runtime_version", "driver_version", "devices",
 * "error"}. Loading nothing is not an error: "available" is false and
 * "error" says what was tried. */
int spdl_cuda_status(const char *paths_json, char **out_json, char **err);

/* Pipelines are referred to by opaque non-zero handles. Every
 * spdl_pipeline_* function returns SPDL_ERROR, with a message, for handle 0
 * or a handle already freed.
 *
 * spdl_pipeline_new: builds a pipeline from the spec_len bytes of JSON at
 *   spec_json (not NUL-terminated; copied). The schema (source, stages,
 *   buffer and queue sizes, failure limits, threads) is documented in
 *   capi/spec.go, which parses it; the Python builder
 *   writes it. *out receives the handle. SPDL_ERROR names what is wrong
 *   with the spec. The pipeline is idle until spdl_pipeline_start.
 * spdl_pipeline_start: begins one epoch (a pass over the source). Fails if
 *   an epoch is running. After an epoch ends, start begins the next one.
 * spdl_pipeline_next: waits up to timeout_us microseconds (< 0: forever)
 *   for the next item. SPDL_OK: *out is the wire-encoded item, owned by the
 *   caller (free out->data with spdl_free after decoding; the references
 *   inside now belong to the caller). SPDL_END, SPDL_TIMEOUT: *out is
 *   untouched. SPDL_ERROR: the epoch failed (the message names the stage
 *   and item; spdl_pipeline_failure tells more) or the handle is invalid.
 *   A failure keeps what was produced: the items before it come first, then
 *   SPDL_ERROR on every call until the next start. After stop, the items
 *   left in the prefetch buffer come first, then SPDL_END (or the failure).
 * spdl_pipeline_stop: cancels the running epoch and waits until all of its
 *   threads have finished; items still buffered stay for spdl_pipeline_next
 *   (the next start or free releases them). Safe twice.
 * spdl_pipeline_failure: *out_json = the epoch's fatal errors as JSON, null
 *   if none: {"message": the first's, "errors": [{"stage": name, "message":
 *   text, "exc": id}]}, the first first; exc, when not 0, is the registry
 *   object id of the host exception that caused it (a Python stage or
 *   source's), which the host may take back (see spdl_release_fn); caller
 *   frees.
 * spdl_pipeline_stats: *out_json = per-stage statistics as JSON; caller frees.
 * spdl_pipeline_source_state: *out_json = what the source knows that a
 *   checkpoint needs, as JSON (null for sources that keep nothing; for
 *   webdataset and table sources {"sizes": {unit: samples}}, the sample
 *   counts of the shards or parts known so far); caller frees.
 * spdl_pipeline_serve: in a worker process, sends items to the parent over
 *   the socket fd (blocking; the caller keeps it) in the framing of Python's
 *   multiprocessing.Connection, as spdl_go's subprocess protocol has it
 *   (python/spdl_go/pipeline/_subprocess.py): an item that is one tensor in
 *   the shared arena (spdl_shm_arena) goes as b"D\x01" and its descriptor
 *   (spdl_shm_lend_desc), and the worker's reference is dropped. One item
 *   sent takes one of *credits; at 0 it reads the parent's messages:
 *   b"c<n>" adds n (in ASCII), anything else returns SPDL_MESSAGE with the
 *   message in *out (caller frees). It returns SPDL_OK, with the item in
 *   *out as spdl_pipeline_next gives it, for any other item (the caller
 *   sends it); SPDL_END and SPDL_ERROR as spdl_pipeline_next; SPDL_TIMEOUT
 *   when a wait (for an item, or for credits) took timeout_us (< 0:
 *   forever); SPDL_PEER when the socket failed or the parent closed it.
 *   *credits is updated on every return.
 * spdl_pipeline_free: invalidates the handle and stops the pipeline. With
 *   wait_ms < 0 it returns once every thread of the pipeline has finished;
 *   with wait_ms == 0 it returns at once and the stop completes in the
 *   background (for finalisers that may run on the pipeline's own threads);
 *   with wait_ms > 0 it waits at most that long and returns SPDL_TIMEOUT if
 *   some thread is still inside an op (for interpreter exit: a call stuck
 *   in Python must not hang the process). The handle is invalid after any
 *   of them.
 */
int spdl_pipeline_new(const char *spec_json, size_t spec_len, uint64_t *out, char **err);
int spdl_pipeline_start(uint64_t pipeline, char **err);
int spdl_pipeline_next(uint64_t pipeline, int64_t timeout_us, spdl_buf *out, char **err);
int spdl_pipeline_stop(uint64_t pipeline, char **err);
int spdl_pipeline_failure(uint64_t pipeline, char **out_json, char **err);
int spdl_pipeline_stats(uint64_t pipeline, char **out_json, char **err);
int spdl_pipeline_source_state(uint64_t pipeline, char **out_json, char **err);
int spdl_pipeline_serve(uint64_t pipeline, int fd, int64_t timeout_us, int64_t *credits, spdl_buf *out, char **err);
int spdl_pipeline_free(uint64_t pipeline, int64_t wait_ms, char **err);

/* Tracing for the Chrome / Perfetto trace viewer.
 * spdl_pipeline_trace_start: record the next max_spans op calls of every
 *   pipe stage (start, duration, stage, worker, failed); replaces a trace
 *   in progress.
 * spdl_pipeline_trace_write: stop recording and write the spans to path as
 *   Trace Event Format JSON (opens in ui.perfetto.dev). */
int spdl_pipeline_trace_start(uint64_t pipeline, int64_t max_spans, char **err);
int spdl_pipeline_trace_write(uint64_t pipeline, const char *path, char **err);

/* ---- The eager API (python/spdl_go/io.py; capi/io.go) ----
 * One call, one result: no pipeline. Each may be called from many threads
 * at once. SPDL_OK: *out is a malloc'd buffer the caller frees with
 * spdl_free (a wire value for spdl_io_apply and spdl_io_load, whose
 * references then belong to the caller; the encoded file for
 * spdl_io_encode_image). SPDL_ERROR: the input failed, *err names it and
 * says why. SPDL_INVALID: the request or an option is wrong. *out is
 * untouched unless SPDL_OK.
 *
 * spdl_io_apply: runs one registered op (spdl_ops) on the input, the
 *   in_len bytes at in: one wire value (a path or the file's bytes), or
 *   with "batch" a wire list of them. req_json (req_len bytes, copied) is
 *   {"op": {"name": op, "options": {...}}, "name": what to call bytes in
 *   errors, "batch": false, "names": [one per input], "threads": n}; only
 *   "op" is required. The options are the op's, read by the op itself, so
 *   they and its errors are exactly a pipeline's. A batch runs on at most
 *   "threads" (0: one per CPU) goroutines owned by the call; the first
 *   failure stops the rest and is reported with the item's index and
 *   name; the results, which must share dtype and shape, come back as one
 *   tensor (N, ...).
 * spdl_io_load: parses the data_len bytes at data (borrowed for the call)
 *   as format: "npy" (-> a tensor), "npz" (-> a dict of tensors; option
 *   max_uncompressed_bytes, default 1 GiB, checked against the archive's
 *   declared sizes before anything is inflated), "wav" (-> a tuple
 *   (tensor (frames, channels), sample rate); options time_offset_seconds,
 *   duration_seconds) or "tar" (-> a list of (name, offset, size) tuples,
 *   one per regular file, its contents at data[offset:offset+size]).
 *   opts_json (opts_len bytes, may be NULL) is a JSON object of options;
 *   "name" names the input in errors.
 * spdl_io_encode_image: encodes an image, the wire value at in (a tensor:
 *   'D', 'V' or 'v'; the reference moves to the library), as JPEG
 *   (TurboJPEG) or PNG. opts_json: {"format": "jpeg" | "png", "pix_fmt":
 *   "rgb24" | "bgr24" | "rgba" | "gray" | "gray16" (default: from the
 *   shape (H, W[, C]) and dtype), "quality": 1..100 (JPEG, default 75),
 *   "subsampling": "420" | "422" | "444" (JPEG), "compression_level":
 *   -1..9 (PNG)}. *out is the file's bytes.
 */
int spdl_io_apply(const char *req_json, size_t req_len, const void *in, size_t in_len, spdl_buf *out, char **err);
int spdl_io_load(const char *format, const char *opts_json, size_t opts_len, const void *data, size_t data_len,
                 spdl_buf *out, char **err);
int spdl_io_encode_image(const void *in, size_t in_len, const char *opts_json, size_t opts_len, spdl_buf *out,
                         char **err);

/* ---- Tensors (core/tensor/tensor.h) ----
 * A spdl_tensor is a refcounted block of C memory (or an adopted foreign
 * DLPack tensor) with its DLTensor view. Wire tag 'D' moves one reference.
 *
 * spdl_tensor_alloc: a new contiguous CPU tensor from the pool (64-byte
 *   aligned, not zeroed) of ndim dimensions shape[] (read, not kept) and
 *   dtype {code, bits, lanes} as in DLDataType (bits a positive multiple
 *   of 8); NULL for a negative dimension, a bad dtype, an overflowing size
 *   or no memory. The caller owns the reference.
 * spdl_tensor_incref / spdl_tensor_decref: take / drop a reference (t must
 *   be a reference the caller owns; decref ignores NULL); the memory
 *   returns to the pool when the last one goes.
 * spdl_tensor_dltensor: the DLTensor view (borrowed, valid while a
 *   reference is held).
 * spdl_tensor_to_dlpack_versioned / _legacy: a new DLManagedTensor(Versioned)
 *   holding a new reference (t's own stays with the caller); its deleter
 *   drops it and frees the struct. Hand it to a consumer. NULL if t is NULL
 *   or memory is exhausted.
 * spdl_mem_stats: *out_json = {"live_tensors", "live_bytes" (bytes of
 *   pooled buffers in use), "pooled_bytes" (bytes cached for reuse),
 *   "allocations" (buffers allocated from the system since start)}, all
 *   integers; caller frees. Each value is exact; together they are not a
 *   snapshot.
 * spdl_mem_set_pool_limit: bytes the pool may cache (default 256 MiB).
 * spdl_mem_trim: frees every cached buffer.
 *
 * A tensor made by the to_device op is in CUDA device memory (DLDevice
 * kDLCUDA); its data is a device address.
 * spdl_tensor_note_stream: call before exporting a device tensor with the
 *   stream the consumer passed to __dlpack__ (1 legacy default, 2
 *   per-thread default, else a cudaStream_t; -1 when the consumer gave no
 *   stream to follow). The memory is reused only after that stream's
 *   queued work, or freed with cudaFree (which waits for the device) when
 *   the stream is unknown or several were noted. No-op on CPU tensors.
 * spdl_cuda_mem_stats: *out_json = {"pinned_live_bytes",
 *   "pinned_cached_bytes", "device_live_bytes", "device_cached_bytes"
 *   (summed over devices), "allocations" and "frees" (buffers obtained from
 *   and given back to CUDA since start), "reuse_waits" (reuses that waited
 *   for a consumer's stream)}, all integers; caller frees. All zero until
 *   CUDA is used.
 * spdl_cuda_mem_trim: frees every cached pinned and device buffer.
 */
typedef struct spdl_tensor spdl_tensor;
spdl_tensor *spdl_tensor_alloc(int32_t ndim, const int64_t *shape, uint8_t code, uint8_t bits, uint16_t lanes);
void spdl_tensor_incref(spdl_tensor *t);
void spdl_tensor_decref(spdl_tensor *t);
const DLTensor *spdl_tensor_dltensor(const spdl_tensor *t);
DLManagedTensorVersioned *spdl_tensor_to_dlpack_versioned(spdl_tensor *t);
DLManagedTensor *spdl_tensor_to_dlpack_legacy(spdl_tensor *t);
int spdl_mem_stats(char **out_json, char **err);
void spdl_mem_set_pool_limit(int64_t bytes);
void spdl_mem_trim(void);
void spdl_tensor_note_stream(spdl_tensor *t, intptr_t stream);
int spdl_cuda_mem_stats(char **out_json, char **err);
void spdl_cuda_mem_trim(void);

/* ---- Shared-memory arena (core/tensor/tensor.h) ----
 * For a pipeline in a subprocess: batches cross to the parent without a
 * copy. The child calls spdl_shm_arena(fd, size) once with a memfd both
 * processes have, before building its pipeline (0 or an errno value);
 * pooled buffers then come from it while it has room. spdl_shm_lend(t,
 * out) lends t's buffer to the parent (1, with out[0] the offset of its
 * header and out[1] that of t's first element) or says it is not in the
 * arena (0). The parent maps the memfd with spdl_shm_map (NULL and *err an errno
 * value on failure), makes tensors over lent buffers with spdl_shm_tensor (a new
 * reference; NULL when the offsets, shape or strides reach outside the
 * buffer), and drops its handle with spdl_shm_unmap; the mapping stays
 * while any tensor over it lives. A parent tensor's last reference gives
 * the buffer back to the child; no message crosses.
 * spdl_shm_stats(out): arena bytes (0: none), bytes carved from it,
 * buffers freed by the child but still lent, lends since start,
 * allocations that found it full.
 */
int spdl_shm_arena(int fd, int64_t size);
int spdl_shm_lend(spdl_tensor *t, int64_t *out);
void spdl_shm_stats(int64_t *out);
void *spdl_shm_map(int fd, int64_t size, int *err);
void spdl_shm_unmap(void *map);
spdl_tensor *spdl_shm_tensor(void *map, int64_t hdr_off, int64_t data_off, int32_t ndim, const int64_t *shape,
                             const int64_t *strides, uint8_t code, uint8_t bits, uint16_t lanes);
/* One message instead: spdl_shm_lend_desc(t, out, cap) lends t and writes
 * its descriptor (24 + 16 * ndim bytes: both offsets, ndim, dtype, dims,
 * strides; this machine's byte order) to out, returning its length (0: not
 * in the arena, -1: cap too small; nothing lent either way), and
 * spdl_shm_tensor_desc(map, desc, len) makes the parent's tensor from it
 * (NULL when malformed or outside its buffer). */
int32_t spdl_shm_lend_desc(spdl_tensor *t, uint8_t *out, int32_t cap);
spdl_tensor *spdl_shm_tensor_desc(void *map, const uint8_t *desc, int32_t len);
/* An Arrow buffer the engine made in the arena (in a worker process,
 * buffers of 4 KiB or more of its Arrow arrays are carved there):
 * spdl_shm_lend_buffer(p, len, out, cap) lends the first len bytes of the
 * one that starts at p and writes the descriptor of a 1-D uint8 tensor over
 * them, for spdl_shm_tensor_desc; its length, or 0 (nothing lent) when p
 * starts no live arena buffer of the engine's Arrow allocator or len is past
 * its end, -1 when cap is too small. */
int32_t spdl_shm_lend_buffer(void *p, int64_t len, uint8_t *out, int32_t cap);

/* Bytes of Arrow buffers (C memory) alive now, exported or not. */
int64_t spdl_arrow_allocated_bytes(void);

/* ---- Python capsules ----
 * The host registers the running interpreter's PyCapsule_IsValid and
 * PyCapsule_GetPointer (e.g. from ctypes.pythonapi) once; then these
 * destructors can be given to PyCapsule_New:
 *   spdl_dlpack_capsule_destructor: for "dltensor_versioned" and "dltensor"
 *     capsules; calls the tensor's deleter only if no consumer took it
 *     (a consumer renames the capsule "used_dltensor...").
 *   spdl_arrow_schema_capsule_destructor / spdl_arrow_array_capsule_destructor:
 *     for "arrow_schema" / "arrow_array" capsules; call the struct's release
 *     callback if a consumer did not move it out, then free the struct.
 *   The capsule argument is the PyObject* of the capsule.
 * spdl_arrow_free: releases (if not moved out) and frees an exported pair
 *   (struct ArrowSchema *, struct ArrowArray *, wire tag 'A') that never
 *   went into capsules. Either pointer may be NULL.
 */
void spdl_set_python_api(void *capsule_is_valid, void *capsule_get_pointer);
void spdl_dlpack_capsule_destructor(void *capsule);
void spdl_arrow_schema_capsule_destructor(void *capsule);
void spdl_arrow_array_capsule_destructor(void *capsule);
void spdl_arrow_free(void *schema, void *array);

/* The host registers PyGILState_Ensure, PyGILState_Release,
 * PyEval_SaveThread and PyEval_RestoreThread once; then every Go thread
 * that runs Python stages or sources keeps one Python thread state for its
 * lifetime instead of one per callback. Without it callbacks still work
 * (ctypes makes a thread state per call), only slower. */
void spdl_set_python_thread_api(void *gil_ensure, void *gil_release, void *save_thread, void *restore_thread);

/* ---- Test builds only ----
 * A libspdl built with -tags cudatest (make cudatest-lib) also exports
 * these; release builds do not (python/tests/test_cuda_standin.py uses
 * them). They drive core/cuda/cudatest, a host-memory stand-in for the
 * CUDA runtime:
 * spdl_cudatest_install: installs the stand-in with ndevices GPUs; 0 on
 *   success, -1 if a real runtime was installed first.
 * spdl_cudatest_count: one of the stand-in's counters (cudatest.Counter).
 */
int64_t spdl_cudatest_install(int64_t ndevices);
int64_t spdl_cudatest_count(int64_t which);

#ifdef __cplusplus
}
#endif
#endif /* SPDL_H */
