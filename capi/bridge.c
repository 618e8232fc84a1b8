// Plain C parts of the ABI: callback trampolines and Python capsule
// destructors. They run on the caller's thread without entering Go, which
// keeps a capsule's destruction (once per batch, under the GIL) cheap.
#include <stdlib.h>
#include <string.h>
#include "bridge.h"  // and spdl.h, which declares every definition below
// tensor.h declares the C functions of core/tensor that spdl.h makes part
// of the ABI: including both lets the compiler check that they agree.
#include "tensor.h"

int spdl_invoke_call(spdl_call_fn f, uint64_t id, const uint8_t *in, size_t n, spdl_buf *out) {
  return f(id, in, n, out);
}

int spdl_invoke_next(spdl_next_fn f, uint64_t id, spdl_buf *out) { return f(id, out); }

void spdl_invoke_release(spdl_release_fn f, uint64_t id) { f(id); }

void spdl_buf_set(spdl_buf *out, const void *data, size_t n) {
  // malloc(0) may return NULL; one byte keeps "set" distinguishable.
  out->data = (uint8_t *)malloc(n ? n : 1);
  if (out->data == NULL) {
    out->len = 0;
    return;
  }
  if (n) memcpy(out->data, data, n);
  out->len = n;
}

void spdl_free(void *p) { free(p); }

// The Arrow C Data Interface structs, as the specification lays them out.
struct ArrowSchema {
  const char *format;
  const char *name;
  const char *metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema **children;
  struct ArrowSchema *dictionary;
  void (*release)(struct ArrowSchema *);
  void *private_data;
};

struct ArrowArray {
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void **buffers;
  struct ArrowArray **children;
  struct ArrowArray *dictionary;
  void (*release)(struct ArrowArray *);
  void *private_data;
};

// Set once by the host from the running interpreter (ctypes.pythonapi),
// so this library needs no link-time dependency on libpython.
typedef int (*capsule_is_valid_fn)(void *, const char *);
typedef void *(*capsule_get_pointer_fn)(void *, const char *);
static capsule_is_valid_fn py_capsule_is_valid;
static capsule_get_pointer_fn py_capsule_get_pointer;

void spdl_set_python_api(void *is_valid, void *get_pointer) {
  py_capsule_is_valid = (capsule_is_valid_fn)is_valid;
  py_capsule_get_pointer = (capsule_get_pointer_fn)get_pointer;
}

// Persistent Python thread states for Go worker threads. A ctypes callback
// on a thread with no Python thread state creates one and destroys it on
// return, every call; giving each worker thread a state for its lifetime
// turns that into a plain GIL acquire (or an attach, on free-threaded
// builds).
typedef int (*gil_ensure_fn)(void);
typedef void (*gil_release_fn)(int);
typedef void *(*save_thread_fn)(void);
typedef void (*restore_thread_fn)(void *);
static gil_ensure_fn py_gil_ensure;
static gil_release_fn py_gil_release;
static save_thread_fn py_save_thread;
static restore_thread_fn py_restore_thread;

void spdl_set_python_thread_api(void *ensure, void *release, void *save, void *restore) {
  py_gil_ensure = (gil_ensure_fn)ensure;
  py_gil_release = (gil_release_fn)release;
  py_save_thread = (save_thread_fn)save;
  py_restore_thread = (restore_thread_fn)restore;
}

struct spdl_py_thread {
  int gil_state;
  void *tstate;
};

void *spdl_py_thread_attach(void) {
  if (py_gil_ensure == NULL) return NULL;
  struct spdl_py_thread *t = malloc(sizeof *t);
  if (t == NULL) return NULL;
  t->gil_state = py_gil_ensure();  // creates this thread's state
  t->tstate = py_save_thread();    // and lets go of the GIL at once
  return t;
}

void spdl_py_thread_detach(void *handle) {
  struct spdl_py_thread *t = handle;
  if (t == NULL) return;
  py_restore_thread(t->tstate);
  py_gil_release(t->gil_state);  // destroys the state
  free(t);
}

// The capsule's own pointer, or NULL when it was renamed by a consumer
// (or the API is not installed). IsValid sets no Python error.
static void *capsule_pointer(void *capsule, const char *name) {
  if (py_capsule_is_valid == NULL || !py_capsule_is_valid(capsule, name)) return NULL;
  return py_capsule_get_pointer(capsule, name);
}

void spdl_dlpack_capsule_destructor(void *capsule) {
  DLManagedTensorVersioned *v = capsule_pointer(capsule, "dltensor_versioned");
  if (v != NULL) {
    if (v->deleter) v->deleter(v);
    return;
  }
  DLManagedTensor *m = capsule_pointer(capsule, "dltensor");
  if (m != NULL && m->deleter) m->deleter(m);
}

void spdl_arrow_free(void *schema, void *array) {
  struct ArrowSchema *s = schema;
  struct ArrowArray *a = array;
  if (s != NULL) {
    if (s->release) s->release(s);
    free(s);
  }
  if (a != NULL) {
    if (a->release) a->release(a);
    free(a);
  }
}

void spdl_arrow_schema_capsule_destructor(void *capsule) {
  spdl_arrow_free(capsule_pointer(capsule, "arrow_schema"), NULL);
}

void spdl_arrow_array_capsule_destructor(void *capsule) {
  spdl_arrow_free(NULL, capsule_pointer(capsule, "arrow_array"));
}
