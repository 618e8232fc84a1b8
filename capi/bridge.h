// Declarations shared by bridge.c and the cgo preamble of the Go files.
#ifndef SPDL_BRIDGE_H
#define SPDL_BRIDGE_H
#include <stdint.h>
#include <stddef.h>

typedef struct spdl_buf {
  uint8_t *data;
  size_t len;
} spdl_buf;

typedef int (*spdl_call_fn)(uint64_t fn_id, const uint8_t *in, size_t in_len, spdl_buf *out);
typedef int (*spdl_next_fn)(uint64_t src_id, spdl_buf *out);
typedef void (*spdl_release_fn)(uint64_t obj_id);

// Go cannot call a C function pointer directly; these do it.
int spdl_invoke_call(spdl_call_fn f, uint64_t id, const uint8_t *in, size_t n, spdl_buf *out);
int spdl_invoke_next(spdl_next_fn f, uint64_t id, spdl_buf *out);
void spdl_invoke_release(spdl_release_fn f, uint64_t id);

void spdl_buf_set(spdl_buf *out, const void *data, size_t n);
void *spdl_py_thread_attach(void);
void spdl_py_thread_detach(void *handle);
#endif
