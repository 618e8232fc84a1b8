// Internal C helpers of capi, shared by bridge.c and the cgo preambles.
// None of them is exported from libspdl.so (libspdl.map); the ABI itself,
// with the spdl_buf and callback types used here, is spdl.h.
#ifndef SPDL_BRIDGE_H
#define SPDL_BRIDGE_H
#include "spdl.h"

// cgo cannot spell const: Go exports take these where spdl.h has a const
// pointer, so that cgo's prototypes match spdl.h's and the compiler checks
// every export against the header (the cgo preambles include it).
typedef const char spdl_cchar;
typedef const void spdl_cvoid;

// Go cannot call a C function pointer directly; these do it.
int spdl_invoke_call(spdl_call_fn f, uint64_t id, const uint8_t *in, size_t n, spdl_buf *out);
int spdl_invoke_next(spdl_next_fn f, uint64_t id, spdl_buf *out);
void spdl_invoke_release(spdl_release_fn f, uint64_t id);

// A persistent Python thread state for the calling Go thread (see
// spdl_set_python_thread_api); NULL when the host installed none.
void *spdl_py_thread_attach(void);
void spdl_py_thread_detach(void *handle);
#endif
