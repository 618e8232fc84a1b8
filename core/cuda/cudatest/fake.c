// fake.c: a CUDA runtime stand-in on host memory, for tests on machines
// without a GPU. Each function has cudart's signature; "device" memory is
// ordinary heap memory, copies are memcpy, and streams and events are
// bookkeeping. The counters let tests check what spdl-go asked CUDA to do.

#include "fake.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum { OK = 0, ERR_INVALID_VALUE = 1, ERR_MEMORY = 2, ERR_INVALID_DEVICE = 101 };

static atomic_int devices = 1;
static _Thread_local int current_device;
atomic_llong fake_counts[FAKE_NCOUNTS];
static atomic_int fail_next[FAKE_NCOUNTS];

void fake_reset(int ndevices) {
  atomic_store(&devices, ndevices);
  for (int i = 0; i < FAKE_NCOUNTS; i++) {
    atomic_store(&fake_counts[i], 0);
    atomic_store(&fail_next[i], 0);
  }
}

long long fake_count(int which) { return atomic_load(&fake_counts[which]); }
void fake_fail_next(int which) { atomic_store(&fail_next[which], 1); }

static int failing(int which) {
  int one = 1;
  return atomic_compare_exchange_strong(&fail_next[which], &one, 0);
}

typedef struct {
  int recorded;
  void* stream;
} fake_event;

int fake_cudaGetDeviceCount(int* n) {
  *n = atomic_load(&devices);
  return *n > 0 ? OK : 100;  // cudaErrorNoDevice
}
int fake_cudaSetDevice(int d) {
  if (d < 0 || d >= atomic_load(&devices)) return ERR_INVALID_DEVICE;
  current_device = d;
  return OK;
}
const char* fake_cudaGetErrorString(int code) {
  switch (code) {
    case OK: return "no error";
    case ERR_MEMORY: return "out of memory";
    case 100: return "no CUDA-capable device is detected";
    case ERR_INVALID_DEVICE: return "invalid device ordinal";
  }
  return "invalid argument";
}
int fake_cudaHostAlloc(void** p, size_t n, unsigned int flags) {
  (void)flags;
  if (failing(FAKE_HOST_ALLOC)) return ERR_MEMORY;
  *p = malloc(n ? n : 1);
  if (*p == NULL) return ERR_MEMORY;
  atomic_fetch_add(&fake_counts[FAKE_HOST_ALLOC], 1);
  return OK;
}
int fake_cudaFreeHost(void* p) {
  free(p);
  atomic_fetch_add(&fake_counts[FAKE_FREE_HOST], 1);
  return OK;
}
int fake_cudaMalloc(void** p, size_t n) {
  if (failing(FAKE_MALLOC)) return ERR_MEMORY;
  *p = malloc(n ? n : 1);
  if (*p == NULL) return ERR_MEMORY;
  atomic_fetch_add(&fake_counts[FAKE_MALLOC], 1);
  return OK;
}
int fake_cudaFree(void* p) {
  free(p);
  atomic_fetch_add(&fake_counts[FAKE_FREE], 1);
  return OK;
}
int fake_cudaStreamCreate(void** s) { return fake_cudaStreamCreateWithFlags(s, 0); }
int fake_cudaStreamCreateWithFlags(void** s, unsigned int flags) {
  (void)flags;
  *s = malloc(16);
  atomic_fetch_add(&fake_counts[FAKE_STREAMS], 1);
  return OK;
}
int fake_cudaStreamSynchronize(void* s) {
  (void)s;
  atomic_fetch_add(&fake_counts[FAKE_SYNCS], 1);
  return OK;
}
int fake_cudaStreamDestroy(void* s) {
  free(s);
  atomic_fetch_sub(&fake_counts[FAKE_STREAMS], 1);
  return OK;
}
int fake_cudaMemcpyAsync(void* dst, const void* src, size_t n, int kind, void* s) {
  (void)s;
  if (kind != 1 && kind != 2) return ERR_INVALID_VALUE;
  if (failing(FAKE_COPIES)) return ERR_INVALID_VALUE;
  memcpy(dst, src, n);
  atomic_fetch_add(&fake_counts[FAKE_COPIES], 1);
  atomic_fetch_add(&fake_counts[FAKE_COPY_BYTES], (long long)n);
  return OK;
}
int fake_cudaRuntimeGetVersion(int* v) {
  *v = 13000;
  return OK;
}
int fake_cudaDriverGetVersion(int* v) {
  *v = 13000;
  return OK;
}
int fake_cudaEventCreateWithFlags(void** ev, unsigned int flags) {
  (void)flags;
  *ev = calloc(1, sizeof(fake_event));
  atomic_fetch_add(&fake_counts[FAKE_EVENTS], 1);
  return OK;
}
int fake_cudaEventRecord(void* ev, void* stream) {
  if (failing(FAKE_RECORDS)) return ERR_INVALID_VALUE;
  fake_event* e = ev;
  e->recorded = 1;
  e->stream = stream;
  atomic_fetch_add(&fake_counts[FAKE_RECORDS], 1);
  return OK;
}
int fake_cudaStreamWaitEvent(void* stream, void* ev, unsigned int flags) {
  (void)stream;
  (void)flags;
  fake_event* e = ev;
  if (!e->recorded) return ERR_INVALID_VALUE;  // spdl-go must only wait for recorded events
  atomic_fetch_add(&fake_counts[FAKE_WAITS], 1);
  return OK;
}
int fake_cudaEventSynchronize(void* ev) {
  (void)ev;
  return OK;
}
int fake_cudaEventDestroy(void* ev) {
  free(ev);
  atomic_fetch_sub(&fake_counts[FAKE_EVENTS], 1);
  return OK;
}

#define SYM(name) {#name, (void*)fake_##name}
static const struct {
  const char* name;
  void* fn;
} syms[] = {
    SYM(cudaGetDeviceCount), SYM(cudaSetDevice), SYM(cudaGetErrorString), SYM(cudaHostAlloc),
    SYM(cudaFreeHost), SYM(cudaMalloc), SYM(cudaFree), SYM(cudaStreamCreate),
    SYM(cudaStreamSynchronize), SYM(cudaStreamDestroy), SYM(cudaMemcpyAsync),
    SYM(cudaRuntimeGetVersion), SYM(cudaDriverGetVersion), SYM(cudaStreamCreateWithFlags),
    SYM(cudaStreamWaitEvent), SYM(cudaEventCreateWithFlags), SYM(cudaEventRecord),
    SYM(cudaEventSynchronize), SYM(cudaEventDestroy),
};

uintptr_t fake_symbol(const char* name) {
  for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
    if (strcmp(syms[i].name, name) == 0) return (uintptr_t)syms[i].fn;
  }
  return 0;
}
