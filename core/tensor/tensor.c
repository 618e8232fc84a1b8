// tensor.c: reference-counted CPU tensors, their buffer pool and DLPack
// exchange. See tensor.h for the contract of each function.

#include "tensor.h"

#include "copy.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

enum { OWNER_POOL, OWNER_VERSIONED, OWNER_LEGACY, OWNER_PINNED, OWNER_DEVICE, OWNER_SHM };

typedef struct cuda_buf cuda_buf;

struct spdl_tensor {
  atomic_llong refs;
  DLTensor dl;       // shape and strides point into dims
  int owner;         // OWNER_*
  int read_only;     // imported with DLPACK_FLAG_BITMASK_READ_ONLY
  void* foreign;     // the imported DLManagedTensor[Versioned]; OWNER_SHM: the shm_map
  void* buf;         // OWNER_POOL: the pooled buffer; OWNER_SHM: the buffer's shm_hdr
  size_t cap;        // OWNER_POOL: its size class in bytes
  int cls;           // OWNER_POOL: its size class index
  cuda_buf* cbuf;    // OWNER_PINNED, OWNER_DEVICE: the pooled CUDA buffer
  atomic_intptr_t stream;  // OWNER_DEVICE: the consumer's stream, 0 if none
  atomic_int streams_differ;  // OWNER_DEVICE: noted on two streams
  int64_t dims[];    // shape[ndim] then strides[ndim]
};

// ---- statistics ------------------------------------------------------------

static atomic_llong st_blocks;   // live spdl_tensor blocks
static atomic_llong st_live;     // bytes of pooled buffers in use
static atomic_llong st_pooled;   // bytes in the free lists
static atomic_llong st_allocs;   // buffers obtained from the system

void spdl_pool_stats(int64_t out[4]) {
  out[0] = atomic_load(&st_blocks);
  out[1] = atomic_load(&st_live);
  out[2] = atomic_load(&st_pooled);
  out[3] = atomic_load(&st_allocs);
}

// ---- buffer pool -----------------------------------------------------------
//
// Size classes: multiples of 4 KiB up to 64 KiB (16 classes), then 8 classes
// per power of two (waste at most 1/8). A free buffer's first word links it
// into its class's list, so the lists cost no memory of their own.

#define SMALL_STEP 4096
#define SMALL_MAX 65536
#define SMALL_CLASSES 16
#define MAX_BYTES ((size_t)1 << 62)
#define NUM_CLASSES (SMALL_CLASSES + (62 - 16) * 8)

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static void* pool_free[NUM_CLASSES];              // guarded by pool_mu
static long long pool_limit = 256LL << 20;        // guarded by pool_mu

// size_class returns the class index of an n-byte request and stores the
// class's size in *cap; -1 if n is too large.
static int size_class(size_t n, size_t* cap) {
  if (n == 0) n = 1;
  if (n > MAX_BYTES) return -1;
  if (n <= SMALL_MAX) {
    size_t c = (n + SMALL_STEP - 1) / SMALL_STEP;
    *cap = c * SMALL_STEP;
    return (int)c - 1;
  }
  int k = 63 - __builtin_clzll((unsigned long long)(n - 1));  // 2^k < n <= 2^(k+1)
  size_t base = (size_t)1 << k, step = base >> 3;
  size_t m = (n - base + step - 1) / step;  // 1..8
  *cap = base + m * step;
  return SMALL_CLASSES + (k - 16) * 8 + (int)(m - 1);
}

static void* shm_get(int c, size_t cap);
static int shm_put(void* p);

static void* pool_get(size_t n, size_t* cap, int* cls) {
  int c = size_class(n, cap);
  if (c < 0) return NULL;
  void* s = shm_get(c, *cap);
  if (s != NULL) {
    atomic_fetch_add(&st_live, (long long)*cap);
    *cls = c;
    return s;
  }
  pthread_mutex_lock(&pool_mu);
  void* p = pool_free[c];
  if (p != NULL) {
    pool_free[c] = *(void**)p;
    atomic_fetch_sub(&st_pooled, (long long)*cap);
  }
  pthread_mutex_unlock(&pool_mu);
  if (p == NULL) {
    p = aligned_alloc(64, *cap);  // cap is a multiple of 4096
    if (p == NULL) return NULL;
    atomic_fetch_add(&st_allocs, 1);
  }
  atomic_fetch_add(&st_live, (long long)*cap);
  *cls = c;
  return p;
}

static void pool_put(void* p, size_t cap, int cls) {
  atomic_fetch_sub(&st_live, (long long)cap);
  if (shm_put(p)) return;
  pthread_mutex_lock(&pool_mu);
  if (atomic_load(&st_pooled) + (long long)cap <= pool_limit) {
    *(void**)p = pool_free[cls];
    pool_free[cls] = p;
    atomic_fetch_add(&st_pooled, (long long)cap);
    p = NULL;
  }
  pthread_mutex_unlock(&pool_mu);
  free(p);
}

// class_size returns the size of class c (the inverse of size_class).
static size_t class_size(int c) {
  if (c < SMALL_CLASSES) return (size_t)(c + 1) * SMALL_STEP;
  int k = 16 + (c - SMALL_CLASSES) / 8;
  size_t m = (size_t)((c - SMALL_CLASSES) % 8) + 1;
  size_t base = (size_t)1 << k;
  return base + m * (base >> 3);
}

// shrink_locked unlinks cached buffers, largest classes first, until at most
// keep bytes remain cached; it returns them as a chain for the caller to free
// after unlocking.
static void* shrink_locked(long long keep) {
  void* chain = NULL;
  for (int c = NUM_CLASSES - 1; c >= 0 && atomic_load(&st_pooled) > keep; c--) {
    size_t cap = class_size(c);
    while (pool_free[c] != NULL && atomic_load(&st_pooled) > keep) {
      void* p = pool_free[c];
      pool_free[c] = *(void**)p;
      *(void**)p = chain;
      chain = p;
      atomic_fetch_sub(&st_pooled, (long long)cap);
    }
  }
  return chain;
}

static void free_chain(void* p) {
  while (p != NULL) {
    void* next = *(void**)p;
    free(p);
    p = next;
  }
}

void spdl_mem_set_pool_limit(int64_t bytes) {
  if (bytes < 0) bytes = 0;
  pthread_mutex_lock(&pool_mu);
  pool_limit = bytes;
  void* chain = shrink_locked(bytes);
  pthread_mutex_unlock(&pool_mu);
  free_chain(chain);
}

void spdl_mem_trim(void) {
  pthread_mutex_lock(&pool_mu);
  void* chain = shrink_locked(0);
  pthread_mutex_unlock(&pool_mu);
  free_chain(chain);
}

// ---- tensors ---------------------------------------------------------------

static spdl_tensor* new_block(int32_t ndim) {
  spdl_tensor* t = malloc(sizeof(spdl_tensor) + 2 * (size_t)ndim * sizeof(int64_t));
  if (t == NULL) return NULL;
  memset(t, 0, sizeof(*t));
  atomic_init(&t->refs, 1);
  t->dl.device.device_type = kDLCPU;
  t->dl.device.device_id = 0;
  t->dl.ndim = ndim;
  t->dl.shape = ndim > 0 ? t->dims : NULL;
  t->dl.strides = ndim > 0 ? t->dims + ndim : NULL;
  atomic_init(&t->stream, 0);
  atomic_init(&t->streams_differ, 0);
  atomic_fetch_add(&st_blocks, 1);
  return t;
}

static void set_compact_strides(spdl_tensor* t) {
  int64_t s = 1;
  for (int32_t i = t->dl.ndim - 1; i >= 0; i--) {
    t->dl.strides[i] = s;
    s *= t->dl.shape[i] > 0 ? t->dl.shape[i] : 1;
  }
}

// shape_bytes checks an allocation's shape and dtype and stores its size
// in *n; 0 if they are invalid or the size overflows.
static int shape_bytes(int32_t ndim, const int64_t* shape, uint8_t bits, uint16_t lanes, size_t* n) {
  if (ndim < 0 || (ndim > 0 && shape == NULL)) return 0;
  if (bits == 0 || bits % 8 != 0 || lanes == 0) return 0;
  *n = (size_t)(bits / 8) * lanes;
  for (int32_t i = 0; i < ndim; i++) {
    if (shape[i] < 0) return 0;
    if (shape[i] > 0 && *n > MAX_BYTES / (size_t)shape[i]) return 0;
    *n *= (size_t)shape[i];
  }
  return 1;
}

// set_view fills a new block's view of a contiguous buffer.
static void set_view(spdl_tensor* t, void* data, const int64_t* shape, uint8_t code,
                     uint8_t bits, uint16_t lanes) {
  t->dl.data = data;
  t->dl.dtype.code = code;
  t->dl.dtype.bits = bits;
  t->dl.dtype.lanes = lanes;
  if (t->dl.ndim > 0) memcpy(t->dl.shape, shape, (size_t)t->dl.ndim * sizeof(int64_t));
  set_compact_strides(t);
}

// drop_block frees a block whose buffer could not be had.
static void drop_block(spdl_tensor* t) {
  atomic_fetch_sub(&st_blocks, 1);
  free(t);
}

spdl_tensor* spdl_tensor_alloc(int32_t ndim, const int64_t* shape, uint8_t code,
                               uint8_t bits, uint16_t lanes) {
  size_t n;
  if (!shape_bytes(ndim, shape, bits, lanes, &n)) return NULL;
  spdl_tensor* t = new_block(ndim);
  if (t == NULL) return NULL;
  t->owner = OWNER_POOL;
  t->buf = pool_get(n, &t->cap, &t->cls);
  if (t->buf == NULL) {
    drop_block(t);
    return NULL;
  }
  set_view(t, t->buf, shape, code, bits, lanes);
  return t;
}

// wrap copies the foreign view into a new block; NULL if it is not a CPU
// tensor we can describe.
static spdl_tensor* wrap(const DLTensor* src) {
  if (src->device.device_type != kDLCPU) return NULL;
  if (src->ndim < 0 || (src->ndim > 0 && src->shape == NULL)) return NULL;
  spdl_tensor* t = new_block(src->ndim);
  if (t == NULL) return NULL;
  t->dl.data = src->data == NULL ? NULL : (char*)src->data + src->byte_offset;
  t->dl.dtype = src->dtype;
  if (src->ndim > 0) {
    memcpy(t->dl.shape, src->shape, (size_t)src->ndim * sizeof(int64_t));
    if (src->strides != NULL) {
      memcpy(t->dl.strides, src->strides, (size_t)src->ndim * sizeof(int64_t));
    } else {
      set_compact_strides(t);
    }
  }
  return t;
}

spdl_tensor* spdl_tensor_from_dlpack_versioned(DLManagedTensorVersioned* m) {
  if (m == NULL || m->version.major != 1) return NULL;
  spdl_tensor* t = wrap(&m->dl_tensor);
  if (t == NULL) return NULL;
  t->owner = OWNER_VERSIONED;
  t->foreign = m;
  t->read_only = (m->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
  return t;
}

spdl_tensor* spdl_tensor_from_dlpack_legacy(DLManagedTensor* m) {
  if (m == NULL) return NULL;
  spdl_tensor* t = wrap(&m->dl_tensor);
  if (t == NULL) return NULL;
  t->owner = OWNER_LEGACY;
  t->foreign = m;
  return t;
}

static void cuda_put(spdl_tensor* t);
static void shm_return(spdl_tensor* t);

void spdl_tensor_incref(spdl_tensor* t) {
  atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
}

void spdl_tensor_decref(spdl_tensor* t) {
  if (t == NULL) return;
  if (atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1) return;
  switch (t->owner) {
    case OWNER_POOL:
      pool_put(t->buf, t->cap, t->cls);
      break;
    case OWNER_PINNED:
    case OWNER_DEVICE:
      cuda_put(t);
      break;
    case OWNER_VERSIONED: {
      DLManagedTensorVersioned* m = t->foreign;
      if (m->deleter != NULL) m->deleter(m);
      break;
    }
    case OWNER_LEGACY: {
      DLManagedTensor* m = t->foreign;
      if (m->deleter != NULL) m->deleter(m);
      break;
    }
    case OWNER_SHM:
      shm_return(t);
      break;
  }
  atomic_fetch_sub(&st_blocks, 1);
  free(t);
}

// ---- CUDA memory -------------------------------------------------------------
//
// Pinned and device buffers use the CPU pool's size classes, one set of
// free lists per memory (slot 0 pinned, slot d+1 device d). The lists hold
// small nodes, since device memory cannot carry a link. A device node owns
// an event, created with the buffer (events belong to the device current
// when they are made, and a release may run on any thread), recorded on the
// consumer's stream at release and waited for by the producer's stream at
// reuse.

#define CUDA_SLOTS 17  // pinned + 16 devices
#define CUDA_EVENT_DISABLE_TIMING 0x02

struct cuda_buf {
  void* ptr;
  size_t cap;
  int cls;
  int slot;
  void* event;   // device buffers: the release event (NULL if it could not be made)
  int pending;   // event recorded at release and not yet waited for
  cuda_buf* next;
};

static spdl_cuda_api cuda_fns;
static atomic_int cuda_ready;                      // cuda_fns is set
static pthread_mutex_t cuda_mu = PTHREAD_MUTEX_INITIALIZER;
static cuda_buf* cuda_free_list[CUDA_SLOTS][NUM_CLASSES];  // guarded by cuda_mu
static long long cuda_cached[CUDA_SLOTS];          // guarded by cuda_mu
static long long cuda_limit[2] = {256LL << 20, 1LL << 30};  // pinned, per device; guarded by cuda_mu
static atomic_llong cst_pinned_live, cst_pinned_cached, cst_dev_live, cst_dev_cached;
static atomic_llong cst_allocs, cst_frees, cst_waits;

int spdl_cuda_set_api(const spdl_cuda_api* api) {
  if (api == NULL) return -1;
  pthread_mutex_lock(&cuda_mu);
  int rc = 0;
  if (atomic_load(&cuda_ready)) {
    rc = memcmp(&cuda_fns, api, sizeof(*api)) == 0 ? 0 : -1;
  } else {
    cuda_fns = *api;
    atomic_store(&cuda_ready, 1);
  }
  pthread_mutex_unlock(&cuda_mu);
  return rc;
}

void spdl_cuda_pool_stats(int64_t out[7]) {
  out[0] = atomic_load(&cst_pinned_live);
  out[1] = atomic_load(&cst_pinned_cached);
  out[2] = atomic_load(&cst_dev_live);
  out[3] = atomic_load(&cst_dev_cached);
  out[4] = atomic_load(&cst_allocs);
  out[5] = atomic_load(&cst_frees);
  out[6] = atomic_load(&cst_waits);
}

static atomic_llong* cuda_live_stat(int slot) { return slot == 0 ? &cst_pinned_live : &cst_dev_live; }
static atomic_llong* cuda_cached_stat(int slot) { return slot == 0 ? &cst_pinned_cached : &cst_dev_cached; }

// cuda_release_buf gives a buffer back to CUDA. cudaFree waits for the
// device, so work still reading the buffer finishes first. Errors are
// ignored: at process exit the runtime may already be unloading.
static void cuda_release_buf(cuda_buf* b) {
  if (b->slot == 0) {
    cuda_fns.free_host(b->ptr);
  } else {
    cuda_fns.free(b->ptr);
    if (b->event != NULL) cuda_fns.event_destroy(b->event);
  }
  atomic_fetch_add(&cst_frees, 1);
  free(b);
}

// cuda_get returns a buffer of at least n bytes for slot, waiting (on
// stream, for device buffers) for its last consumer.
static cuda_buf* cuda_get(int slot, size_t n, void* stream, int* err) {
  size_t cap;
  int c = size_class(n, &cap);
  if (c < 0) {
    *err = -1;
    return NULL;
  }
  pthread_mutex_lock(&cuda_mu);
  cuda_buf* b = cuda_free_list[slot][c];
  if (b != NULL) {
    cuda_free_list[slot][c] = b->next;
    cuda_cached[slot] -= (long long)cap;
    atomic_fetch_sub(cuda_cached_stat(slot), (long long)cap);
  }
  pthread_mutex_unlock(&cuda_mu);
  if (b != NULL && b->pending) {
    // Queue the wait on the producer's stream; if that is refused, wait
    // here. A buffer whose last use cannot be waited for is not reused.
    if (cuda_fns.stream_wait_event(stream, b->event, 0) != 0 &&
        cuda_fns.event_synchronize(b->event) != 0) {
      cuda_release_buf(b);
      b = NULL;
    } else {
      b->pending = 0;
      atomic_fetch_add(&cst_waits, 1);
    }
  }
  if (b == NULL) {
    b = calloc(1, sizeof(*b));
    if (b == NULL) {
      *err = -1;
      return NULL;
    }
    int rc = slot == 0 ? cuda_fns.host_alloc(&b->ptr, cap, 0) : cuda_fns.malloc(&b->ptr, cap);
    if (rc != 0) {
      free(b);
      *err = rc;
      return NULL;
    }
    if (slot != 0 && cuda_fns.event_create(&b->event, CUDA_EVENT_DISABLE_TIMING) != 0) {
      b->event = NULL;  // released buffers then go back to CUDA, not the pool
    }
    b->cap = cap;
    b->cls = c;
    b->slot = slot;
    atomic_fetch_add(&cst_allocs, 1);
  }
  atomic_fetch_add(cuda_live_stat(slot), (long long)cap);
  return b;
}

static spdl_tensor* cuda_alloc(int slot, int32_t device, void* stream, int32_t ndim,
                               const int64_t* shape, uint8_t code, uint8_t bits,
                               uint16_t lanes, int* cuda_err) {
  int dummy;
  if (cuda_err == NULL) cuda_err = &dummy;
  *cuda_err = -1;
  if (!atomic_load(&cuda_ready)) return NULL;
  if (slot < 0 || slot >= CUDA_SLOTS) return NULL;
  size_t n;
  if (!shape_bytes(ndim, shape, bits, lanes, &n)) return NULL;
  spdl_tensor* t = new_block(ndim);
  if (t == NULL) return NULL;
  t->cbuf = cuda_get(slot, n, stream, cuda_err);
  if (t->cbuf == NULL) {
    drop_block(t);
    return NULL;
  }
  *cuda_err = 0;
  t->owner = slot == 0 ? OWNER_PINNED : OWNER_DEVICE;
  if (slot != 0) {
    t->dl.device.device_type = kDLCUDA;
    t->dl.device.device_id = device;
  }
  set_view(t, t->cbuf->ptr, shape, code, bits, lanes);
  return t;
}

spdl_tensor* spdl_tensor_alloc_pinned(int32_t ndim, const int64_t* shape, uint8_t code,
                                      uint8_t bits, uint16_t lanes, int* cuda_err) {
  return cuda_alloc(0, 0, NULL, ndim, shape, code, bits, lanes, cuda_err);
}

spdl_tensor* spdl_tensor_alloc_device(int32_t device, void* stream, int32_t ndim,
                                      const int64_t* shape, uint8_t code, uint8_t bits,
                                      uint16_t lanes, int* cuda_err) {
  if (device < 0 || device >= CUDA_SLOTS - 1) {
    if (cuda_err != NULL) *cuda_err = -1;
    return NULL;
  }
  return cuda_alloc(device + 1, device, stream, ndim, shape, code, bits, lanes, cuda_err);
}

void spdl_tensor_note_stream(spdl_tensor* t, intptr_t stream) {
  if (t == NULL || t->owner != OWNER_DEVICE || stream == 0) return;
  if (stream == -1) {
    atomic_store(&t->streams_differ, 1);
    return;
  }
  intptr_t none = 0;
  if (!atomic_compare_exchange_strong(&t->stream, &none, stream) && none != stream) {
    atomic_store(&t->streams_differ, 1);
  }
}

// cuda_put takes back the buffer of a released pinned or device tensor.
static void cuda_put(spdl_tensor* t) {
  cuda_buf* b = t->cbuf;
  atomic_fetch_sub(cuda_live_stat(b->slot), (long long)b->cap);
  int keep = 1;
  if (b->slot != 0) {
    intptr_t s = atomic_load(&t->stream);
    if (atomic_load(&t->streams_differ) || b->event == NULL) {
      keep = 0;
    } else if (s != 0) {
      keep = cuda_fns.event_record(b->event, (void*)s) == 0;
      b->pending = keep;
    }
  }
  if (keep) {
    long long limit;
    pthread_mutex_lock(&cuda_mu);
    limit = cuda_limit[b->slot == 0 ? 0 : 1];
    if (cuda_cached[b->slot] + (long long)b->cap <= limit) {
      b->next = cuda_free_list[b->slot][b->cls];
      cuda_free_list[b->slot][b->cls] = b;
      cuda_cached[b->slot] += (long long)b->cap;
      atomic_fetch_add(cuda_cached_stat(b->slot), (long long)b->cap);
      b = NULL;
    }
    pthread_mutex_unlock(&cuda_mu);
  }
  if (b != NULL) cuda_release_buf(b);
}

// cuda_shrink_locked unlinks cached buffers of slot until at most keep
// bytes remain, returning them as a chain to release after unlocking.
static cuda_buf* cuda_shrink_locked(int slot, long long keep, cuda_buf* chain) {
  for (int c = NUM_CLASSES - 1; c >= 0 && cuda_cached[slot] > keep; c--) {
    while (cuda_free_list[slot][c] != NULL && cuda_cached[slot] > keep) {
      cuda_buf* b = cuda_free_list[slot][c];
      cuda_free_list[slot][c] = b->next;
      cuda_cached[slot] -= (long long)b->cap;
      atomic_fetch_sub(cuda_cached_stat(slot), (long long)b->cap);
      b->next = chain;
      chain = b;
    }
  }
  return chain;
}

static void cuda_release_chain(cuda_buf* b) {
  while (b != NULL) {
    cuda_buf* next = b->next;
    cuda_release_buf(b);
    b = next;
  }
}

void spdl_cuda_set_pool_limits(int64_t pinned_bytes, int64_t device_bytes) {
  if (pinned_bytes < 0) pinned_bytes = 0;
  if (device_bytes < 0) device_bytes = 0;
  cuda_buf* chain = NULL;
  pthread_mutex_lock(&cuda_mu);
  cuda_limit[0] = pinned_bytes;
  cuda_limit[1] = device_bytes;
  for (int s = 0; s < CUDA_SLOTS; s++) chain = cuda_shrink_locked(s, cuda_limit[s == 0 ? 0 : 1], chain);
  pthread_mutex_unlock(&cuda_mu);
  cuda_release_chain(chain);
}

void spdl_cuda_mem_trim(void) {
  cuda_buf* chain = NULL;
  pthread_mutex_lock(&cuda_mu);
  for (int s = 0; s < CUDA_SLOTS; s++) chain = cuda_shrink_locked(s, 0, chain);
  pthread_mutex_unlock(&cuda_mu);
  cuda_release_chain(chain);
}

const DLTensor* spdl_tensor_dltensor(const spdl_tensor* t) { return &t->dl; }

int spdl_tensor_read_only(const spdl_tensor* t) {
  return t->read_only;
}

static void versioned_deleter(DLManagedTensorVersioned* self) {
  if (self == NULL) return;
  spdl_tensor_decref(self->manager_ctx);
  free(self);
}

static void legacy_deleter(DLManagedTensor* self) {
  if (self == NULL) return;
  spdl_tensor_decref(self->manager_ctx);
  free(self);
}

DLManagedTensorVersioned* spdl_tensor_to_dlpack_versioned(spdl_tensor* t) {
  if (t == NULL) return NULL;
  DLManagedTensorVersioned* m = malloc(sizeof(*m));
  if (m == NULL) return NULL;
  spdl_tensor_incref(t);
  m->version.major = DLPACK_MAJOR_VERSION;
  m->version.minor = DLPACK_MINOR_VERSION;
  m->manager_ctx = t;
  m->deleter = versioned_deleter;
  m->flags = t->read_only ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
  m->dl_tensor = t->dl;
  return m;
}

DLManagedTensor* spdl_tensor_to_dlpack_legacy(spdl_tensor* t) {
  if (t == NULL) return NULL;
  DLManagedTensor* m = malloc(sizeof(*m));
  if (m == NULL) return NULL;
  spdl_tensor_incref(t);
  m->dl_tensor = t->dl;
  m->manager_ctx = t;
  m->deleter = legacy_deleter;
  return m;
}

// ---- shared-memory arena ---------------------------------------------------
//
// A pipeline run in a subprocess (spdl_go.run_pipeline_in_subprocess) takes
// its pooled buffers from a memfd that the parent maps too, so that a batch
// reaches the parent without a copy. Each buffer follows a 64-byte header in
// the arena. The header's `lent` counts the parent's tensors over the
// buffer; both processes change it atomically (lock-free atomics work
// across processes on a shared mapping). The child reuses a buffer only once
// its own references are gone and lent is 0: a freed buffer still lent
// waits on the pending list, which each allocation sweeps. Nothing else
// crosses: the parent's last reference decrements lent, from any thread,
// with no message. When the arena is full, buffers come from malloc, and
// those cross by copy.

typedef struct {
  atomic_int lent;  // the parent's tensors over this buffer (both processes)
  int32_t cls;      // size class (child only, as the fields below)
  int64_t cap;      // bytes after the header
  int64_t next;     // free or pending list link: offset of the next header, -1 at the end
  char pad[40];
} shm_hdr;

_Static_assert(sizeof(shm_hdr) == 64, "shm_hdr keeps buffers 64-byte aligned");

static _Atomic(char*) shm_base;       // the child's arena; NULL when none
static size_t shm_size;               // set once with shm_base
static size_t shm_bump;               // next unused offset; guarded by pool_mu
static int64_t shm_free[NUM_CLASSES]; // free lists by class; guarded by pool_mu
static int64_t shm_pending = -1;      // freed but lent; guarded by pool_mu
static atomic_llong shm_lends, shm_misses;

static shm_hdr* shm_at(char* base, int64_t off) { return (shm_hdr*)(base + off); }

int spdl_shm_arena(int fd, int64_t size) {
  if (size < 4096 || fd < 0) return EINVAL;
  pthread_mutex_lock(&pool_mu);
  if (atomic_load(&shm_base) != NULL) {
    pthread_mutex_unlock(&pool_mu);
    return EBUSY;
  }
  void* p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    pthread_mutex_unlock(&pool_mu);
    return e;
  }
  for (int c = 0; c < NUM_CLASSES; c++) shm_free[c] = -1;
  shm_size = (size_t)size;
  shm_bump = 0;
  atomic_store(&shm_base, (char*)p);
  pthread_mutex_unlock(&pool_mu);
  return 0;
}

// shm_sweep_locked moves pending buffers the parent has let go to their
// free lists.
static void shm_sweep_locked(char* base) {
  int64_t* link = &shm_pending;
  while (*link >= 0) {
    shm_hdr* h = shm_at(base, *link);
    if (atomic_load_explicit(&h->lent, memory_order_acquire) == 0) {
      int64_t off = *link;
      *link = h->next;
      h->next = shm_free[h->cls];
      shm_free[h->cls] = off;
    } else {
      link = &h->next;
    }
  }
}

// shm_get returns a class-c buffer from the arena, or NULL when there is no
// arena or it is full.
static void* shm_get(int c, size_t cap) {
  char* base = atomic_load(&shm_base);
  if (base == NULL) return NULL;
  pthread_mutex_lock(&pool_mu);
  shm_sweep_locked(base);
  int64_t off = shm_free[c];
  if (off >= 0) {
    shm_free[c] = shm_at(base, off)->next;
  } else if (shm_bump + sizeof(shm_hdr) + cap <= shm_size) {
    off = (int64_t)shm_bump;
    shm_bump += sizeof(shm_hdr) + cap;
    shm_hdr* h = shm_at(base, off);
    atomic_store(&h->lent, 0);
    h->cls = c;
    h->cap = (int64_t)cap;
  }
  pthread_mutex_unlock(&pool_mu);
  if (off < 0) {
    atomic_fetch_add(&shm_misses, 1);
    return NULL;
  }
  return base + off + sizeof(shm_hdr);
}

// shm_put takes back an arena buffer (1), or says p is not one (0).
static int shm_put(void* p) {
  char* base = atomic_load(&shm_base);
  if (base == NULL || (char*)p < base || (char*)p >= base + shm_size) return 0;
  int64_t off = (int64_t)((char*)p - base) - (int64_t)sizeof(shm_hdr);
  shm_hdr* h = shm_at(base, off);
  pthread_mutex_lock(&pool_mu);
  if (atomic_load_explicit(&h->lent, memory_order_acquire) == 0) {
    h->next = shm_free[h->cls];
    shm_free[h->cls] = off;
  } else {
    h->next = shm_pending;
    shm_pending = off;
  }
  pthread_mutex_unlock(&pool_mu);
  return 1;
}

int spdl_shm_lend(spdl_tensor* t, int64_t* out) {
  char* base = atomic_load(&shm_base);
  if (t == NULL || base == NULL || t->owner != OWNER_POOL) return 0;
  char* b = t->buf;
  if (b < base || b >= base + shm_size) return 0;
  shm_hdr* h = (shm_hdr*)(b - sizeof(shm_hdr));
  atomic_fetch_add_explicit(&h->lent, 1, memory_order_acq_rel);
  atomic_fetch_add(&shm_lends, 1);
  out[0] = (int64_t)((char*)h - base);
  out[1] = (int64_t)((char*)t->dl.data - base);
  return 1;
}

// A lent tensor's descriptor, what the other process needs for its view:
// int64 header offset, int64 data offset, int32 ndim, uint8 code, uint8
// bits, uint16 lanes, then ndim int64 dims and ndim int64 strides (in
// elements), in this machine's byte order (both ends run on it).
enum { SHM_DESC_HEAD = 24, SHM_DESC_MAX_DIMS = 64 };

int32_t spdl_shm_lend_desc(spdl_tensor* t, uint8_t* out, int32_t cap) {
  if (t == NULL || out == NULL) return 0;
  int32_t ndim = t->dl.ndim;
  if (ndim < 0 || ndim > SHM_DESC_MAX_DIMS || SHM_DESC_HEAD + 16 * ndim > cap) return -1;
  int64_t off[2];
  if (!spdl_shm_lend(t, off)) return 0;
  memcpy(out, off, 16);
  memcpy(out + 16, &ndim, 4);
  out[20] = t->dl.dtype.code;
  out[21] = t->dl.dtype.bits;
  memcpy(out + 22, &t->dl.dtype.lanes, 2);
  if (ndim > 0) {
    memcpy(out + SHM_DESC_HEAD, t->dl.shape, (size_t)ndim * 8);
    int64_t* st = (int64_t*)(out + SHM_DESC_HEAD + 8 * ndim);
    if (t->dl.strides != NULL) {
      memcpy(st, t->dl.strides, (size_t)ndim * 8);
    } else {
      int64_t step = 1;
      for (int32_t i = ndim - 1; i >= 0; i--) {
        memcpy(st + i, &step, 8);
        step *= t->dl.shape[i];
      }
    }
  }
  return SHM_DESC_HEAD + 16 * ndim;
}

spdl_tensor* spdl_shm_tensor_desc(void* map, const uint8_t* desc, int32_t len) {
  if (desc == NULL || len < SHM_DESC_HEAD) return NULL;
  int64_t off[2], shape[SHM_DESC_MAX_DIMS], strides[SHM_DESC_MAX_DIMS];
  int32_t ndim;
  uint16_t lanes;
  memcpy(off, desc, 16);
  memcpy(&ndim, desc + 16, 4);
  memcpy(&lanes, desc + 22, 2);
  if (ndim < 0 || ndim > SHM_DESC_MAX_DIMS || len != SHM_DESC_HEAD + 16 * ndim) return NULL;
  memcpy(shape, desc + SHM_DESC_HEAD, (size_t)ndim * 8);
  memcpy(strides, desc + SHM_DESC_HEAD + 8 * ndim, (size_t)ndim * 8);
  return spdl_shm_tensor(map, off[0], off[1], ndim, shape, strides, desc[20], desc[21], lanes);
}

void* spdl_shm_buf_alloc(int64_t n, int64_t* cap) {
  size_t c;
  int cls = n > 0 ? size_class((size_t)n, &c) : -1;
  void* p = cls >= 0 ? shm_get(cls, c) : NULL;
  if (p == NULL) return NULL;
  memset(p, 0, (size_t)n);  // Arrow's builders expect zeroed memory, as calloc gives
  *cap = (int64_t)c;
  return p;
}

int spdl_shm_buf_free(void* p) { return shm_put(p); }

int32_t spdl_shm_lend_buf(void* p, int64_t len, uint8_t* out, int32_t cap) {
  char* base = atomic_load(&shm_base);
  char* b = p;
  if (base == NULL || out == NULL || b < base + sizeof(shm_hdr) || b >= base + shm_size) return 0;
  if (cap < SHM_DESC_HEAD + 16) return -1;
  shm_hdr* h = (shm_hdr*)(b - sizeof(shm_hdr));
  if (len < 0 || len > h->cap) return 0;
  atomic_fetch_add_explicit(&h->lent, 1, memory_order_acq_rel);
  atomic_fetch_add(&shm_lends, 1);
  int64_t head[2] = {(int64_t)((char*)h - base), (int64_t)(b - base)}, one = 1;
  int32_t ndim = 1;
  uint16_t lanes = 1;
  memcpy(out, head, 16);
  memcpy(out + 16, &ndim, 4);
  out[20] = kDLUInt;
  out[21] = 8;
  memcpy(out + 22, &lanes, 2);
  memcpy(out + SHM_DESC_HEAD, &len, 8);
  memcpy(out + SHM_DESC_HEAD + 8, &one, 8);
  return SHM_DESC_HEAD + 16;
}

void spdl_shm_stats(int64_t* out) {
  char* base = atomic_load(&shm_base);
  int64_t pending = 0;
  pthread_mutex_lock(&pool_mu);
  if (base != NULL) {
    for (int64_t off = shm_pending; off >= 0; off = shm_at(base, off)->next) pending++;
  }
  out[0] = base == NULL ? 0 : (int64_t)shm_size;
  out[1] = (int64_t)shm_bump;
  out[2] = pending;
  pthread_mutex_unlock(&pool_mu);
  out[3] = atomic_load(&shm_lends);
  out[4] = atomic_load(&shm_misses);
}

// A parent's mapping of a child's arena. It lives while the handle from
// spdl_shm_map or any tensor over it does, so that tensors stay valid after
// the child has exited.
typedef struct {
  atomic_llong refs;
  char* base;
  size_t size;
} shm_map;

void* spdl_shm_map(int fd, int64_t size, int* err) {
  if (size < 4096 || fd < 0) {
    *err = EINVAL;
    return NULL;
  }
  shm_map* m = malloc(sizeof(*m));
  if (m == NULL) {
    *err = ENOMEM;
    return NULL;
  }
  void* p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    *err = errno;
    free(m);
    return NULL;
  }
  atomic_init(&m->refs, 1);
  m->base = p;
  m->size = (size_t)size;
  *err = 0;
  return m;
}

static void shm_map_release(shm_map* m) {
  if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1) return;
  munmap(m->base, m->size);
  free(m);
}

void spdl_shm_unmap(void* m) {
  if (m != NULL) shm_map_release(m);
}

spdl_tensor* spdl_shm_tensor(void* map, int64_t hdr_off, int64_t data_off, int32_t ndim,
                             const int64_t* shape, const int64_t* strides, uint8_t code,
                             uint8_t bits, uint16_t lanes) {
  shm_map* m = map;
  size_t n;
  if (m == NULL || !shape_bytes(ndim, shape, bits, lanes, &n)) return NULL;
  if (hdr_off < 0 || hdr_off % 64 != 0 || (size_t)hdr_off + sizeof(shm_hdr) > m->size) return NULL;
  shm_hdr* h = (shm_hdr*)(m->base + hdr_off);
  int64_t start = hdr_off + (int64_t)sizeof(shm_hdr);
  if (h->cap < 0 || (size_t)start + (size_t)h->cap > m->size) return NULL;
  spdl_tensor* t = new_block(ndim);
  if (t == NULL) return NULL;
  t->dl.data = m->base + data_off;
  t->dl.dtype.code = code;
  t->dl.dtype.bits = bits;
  t->dl.dtype.lanes = lanes;
  if (ndim > 0) {
    memcpy(t->dl.shape, shape, (size_t)ndim * sizeof(int64_t));
    if (strides != NULL) {
      memcpy(t->dl.strides, strides, (size_t)ndim * sizeof(int64_t));
    } else {
      set_compact_strides(t);
    }
  }
  // Every element the view can reach lies within the buffer (strides come
  // from the other process: overflow is checked, not assumed away).
  int64_t lo = 0, hi = 0, item = (int64_t)(bits / 8) * lanes, span, end;
  int bad = 0;
  for (int32_t i = 0; i < ndim && n > 0 && !bad; i++) {
    bad = __builtin_mul_overflow(shape[i] - 1, t->dl.strides[i], &span) || __builtin_mul_overflow(span, item, &span) ||
          (span < 0 ? __builtin_add_overflow(lo, span, &lo) : __builtin_add_overflow(hi, span, &hi));
  }
  if (n > 0 && (bad || __builtin_add_overflow(data_off, lo, &span) || span < start ||
                __builtin_add_overflow(data_off, hi, &end) || __builtin_add_overflow(end, item, &end) ||
                end > start + h->cap)) {
    drop_block(t);
    return NULL;
  }
  t->owner = OWNER_SHM;
  t->foreign = m;
  t->buf = h;
  atomic_fetch_add(&m->refs, 1);
  return t;
}

// shm_return gives a lent buffer back to the child: the last use of a
// parent's tensor.
static void shm_return(spdl_tensor* t) {
  shm_hdr* h = t->buf;
  atomic_fetch_sub_explicit(&h->lent, 1, memory_order_acq_rel);
  shm_map_release(t->foreign);
}
