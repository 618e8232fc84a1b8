// abi_check.c: calls every function spdl.h declares (but the test-only
// spdl_cudatest_*), through the header, against a built libspdl.so.
// python/tests/test_abi.py compiles it with `-std=c11 -Wall -Wextra
// -Werror`, links it to the library and runs it:
//   abi_check <scratch directory>
// It prints one line per check and exits 0 when all pass. (Go ignores
// testdata/, so this file is not part of the library.)
#define _GNU_SOURCE  // memfd_create
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "spdl.h"

static int failures;

#define CHECK(cond, ...)                      \
  do {                                        \
    if (cond) {                               \
      printf("ok    ");                       \
    } else {                                  \
      printf("FAIL  ");                       \
      failures++;                             \
    }                                         \
    printf(__VA_ARGS__);                      \
    printf("\n");                             \
  } while (0)

// EXPECT_ERROR runs call, which may use a fresh `char *err`, and checks
// that it returned SPDL_ERROR with a message.
#define EXPECT_ERROR(what, call)      \
  do {                                \
    char *err = NULL;                 \
    int rc_ = (call);                 \
    check_error((what), rc_, err);    \
  } while (0)

static void check_error(const char *what, int rc, char *err) {
  CHECK(rc == SPDL_ERROR && err != NULL && err[0] != '\0', "%s -> SPDL_ERROR: %s", what,
        err ? err : "(no message)");
  spdl_free(err);
}

// expect_json checks that rc is SPDL_OK with a JSON text that contains
// want, and frees it.
static void expect_json(const char *what, int rc, char *out, char *err, const char *want) {
  CHECK(rc == SPDL_OK && out != NULL && strstr(out, want) != NULL, "%s -> %s", what,
        rc == SPDL_OK ? (out ? out : "(null)") : (err ? err : "(no message)"));
  spdl_free(out);
  spdl_free(err);
}

static void check_handle_zero(void) {
  char *out = NULL;
  uint64_t h = 0;
  spdl_buf buf = {NULL, 0};
  EXPECT_ERROR("spdl_pipeline_start(0)", spdl_pipeline_start(h, &err));
  EXPECT_ERROR("spdl_pipeline_next(0)", spdl_pipeline_next(h, 0, &buf, &err));
  EXPECT_ERROR("spdl_pipeline_stop(0)", spdl_pipeline_stop(h, &err));
  EXPECT_ERROR("spdl_pipeline_stats(0)", spdl_pipeline_stats(h, &out, &err));
  EXPECT_ERROR("spdl_pipeline_failure(0)", spdl_pipeline_failure(h, &out, &err));
  EXPECT_ERROR("spdl_pipeline_source_state(0)", spdl_pipeline_source_state(h, &out, &err));
  EXPECT_ERROR("spdl_pipeline_trace_start(0)", spdl_pipeline_trace_start(h, 10, &err));
  EXPECT_ERROR("spdl_pipeline_trace_write(0)", spdl_pipeline_trace_write(h, "/nonexistent", &err));
  int64_t credits = 1;
  EXPECT_ERROR("spdl_pipeline_serve(0)", spdl_pipeline_serve(h, -1, 0, &credits, &buf, &err));
  EXPECT_ERROR("spdl_pipeline_free(0)", spdl_pipeline_free(h, -1, &err));
  CHECK(out == NULL && buf.data == NULL, "failed calls leave their outputs untouched");
}

// take_tensor reads an item that is one tensor ('D', then the pointer).
static spdl_tensor *take_tensor(const spdl_buf *b) {
  uint64_t p = 0;
  if (b->len != 9 || b->data[0] != 'D') return NULL;
  memcpy(&p, b->data + 1, sizeof p);  // little endian, as the host is
  return (spdl_tensor *)(uintptr_t)p;
}

static void check_tensor(spdl_tensor *t) {
  const DLTensor *dl = spdl_tensor_dltensor(t);
  CHECK(dl != NULL && dl->device.device_type == kDLCPU && dl->dtype.code == kDLFloat &&
            dl->dtype.bits == 32 && dl->ndim == 0,
        "spdl_tensor_dltensor: a float32 scalar on the CPU");
  spdl_tensor_incref(t);
  spdl_tensor_decref(t);
  spdl_tensor_note_stream(t, -1);  // no-op on a CPU tensor
  DLManagedTensorVersioned *v = spdl_tensor_to_dlpack_versioned(t);
  CHECK(v != NULL && v->version.major == DLPACK_MAJOR_VERSION && v->deleter != NULL,
        "spdl_tensor_to_dlpack_versioned");
  if (v != NULL) v->deleter(v);
  DLManagedTensor *m = spdl_tensor_to_dlpack_legacy(t);
  CHECK(m != NULL && m->deleter != NULL, "spdl_tensor_to_dlpack_legacy");
  if (m != NULL) m->deleter(m);
  CHECK(spdl_tensor_to_dlpack_versioned(NULL) == NULL && spdl_tensor_to_dlpack_legacy(NULL) == NULL,
        "spdl_tensor_to_dlpack_*(NULL) -> NULL");
  spdl_tensor_decref(t);
  spdl_tensor_decref(NULL);
}

// seven_tensor applies "to_tensor" to the wire int 7 ('i', then 8
// little-endian bytes): a new tensor, or NULL.
static spdl_tensor *seven_tensor(void) {
  char *err = NULL;
  spdl_buf out = {NULL, 0};
  static const char req[] = "{\"op\": {\"name\": \"to_tensor\", \"options\": {}}}";
  static const uint8_t seven[9] = {'i', 7};
  int rc = spdl_io_apply(req, sizeof req - 1, seven, sizeof seven, &out, &err);
  spdl_tensor *t = rc == SPDL_OK ? take_tensor(&out) : NULL;
  if (t == NULL) printf("spdl_io_apply(to_tensor, 7): %s\n", err ? err : "no tensor");
  spdl_free(out.data);
  spdl_free(err);
  return t;
}

// check_shm runs the shared-memory arena within one process: the arena's
// side lends a tensor's buffer, the mapping's side reads it.
static void check_shm(void) {
  const int64_t size = 1 << 20;
  int fd = memfd_create("abi-check", MFD_CLOEXEC);
  CHECK(fd >= 0 && ftruncate(fd, size) == 0, "memfd_create");
  CHECK(spdl_shm_arena(-1, size) != 0, "spdl_shm_arena(-1) -> an errno value");
  CHECK(spdl_shm_arena(fd, size) == 0, "spdl_shm_arena");
  int64_t st[5] = {0};
  spdl_shm_stats(st);
  CHECK(st[0] == size, "spdl_shm_stats: the arena's size %" PRId64, st[0]);
  int e = 0;
  CHECK(spdl_shm_map(-1, size, &e) == NULL && e != 0, "spdl_shm_map(-1) -> NULL, errno %d", e);
  void *m = spdl_shm_map(fd, size, &e);
  CHECK(m != NULL, "spdl_shm_map");
  spdl_tensor *t = seven_tensor();
  int64_t off[2] = {-1, -1};
  CHECK(t != NULL && spdl_shm_lend(t, off) == 1, "spdl_shm_lend: offsets %" PRId64 ", %" PRId64, off[0], off[1]);
  if (t != NULL && m != NULL) {
    const DLTensor *dl = spdl_tensor_dltensor(t);
    spdl_tensor *p = spdl_shm_tensor(m, off[0], off[1], 0, NULL, NULL, dl->dtype.code, dl->dtype.bits, dl->dtype.lanes);
    const DLTensor *pv = p != NULL ? spdl_tensor_dltensor(p) : NULL;
    CHECK(pv != NULL && pv->data != dl->data && memcmp(pv->data, dl->data, dl->dtype.bits / 8) == 0,
          "spdl_shm_tensor: the same value through the other mapping");
    CHECK(spdl_shm_tensor(m, off[0], off[0], 0, NULL, NULL, dl->dtype.code, dl->dtype.bits, dl->dtype.lanes) == NULL,
          "spdl_shm_tensor(a view outside the buffer) -> NULL");
    spdl_tensor_decref(p);
  }
  spdl_tensor_decref(t);
  uint8_t desc[24 + 16 * 2];
  t = seven_tensor();
  int32_t n = spdl_shm_lend_desc(t, desc, (int32_t)sizeof desc);
  CHECK(n == 24 + 16 * spdl_tensor_dltensor(t)->ndim, "spdl_shm_lend_desc: %d bytes", (int)n);
  CHECK(spdl_shm_lend_desc(t, desc, 8) == -1, "spdl_shm_lend_desc(no room) -> -1");
  if (n > 0 && m != NULL) {
    spdl_tensor *p = spdl_shm_tensor_desc(m, desc, n);
    const DLTensor *pv = p != NULL ? spdl_tensor_dltensor(p) : NULL;
    CHECK(pv != NULL && memcmp(pv->data, spdl_tensor_dltensor(t)->data, pv->dtype.bits / 8) == 0,
          "spdl_shm_tensor_desc: the same value through the other mapping");
    CHECK(spdl_shm_tensor_desc(m, desc, n - 1) == NULL, "spdl_shm_tensor_desc(a short descriptor) -> NULL");
    void *in_arena = spdl_tensor_dltensor(t)->data;  // a tensor's buffer, not an Arrow buffer
    CHECK(spdl_shm_lend_buffer(desc, 8, desc, (int32_t)sizeof desc) == 0 &&
              spdl_shm_lend_buffer(in_arena, 1, desc, (int32_t)sizeof desc) == 0,
          "spdl_shm_lend_buffer(not the engine's Arrow buffer) -> 0");
    spdl_tensor_decref(p);
  }
  spdl_tensor_decref(t);
  const int64_t shape[2] = {3, 5};
  spdl_tensor *a = spdl_tensor_alloc(2, shape, kDLUInt, 16, 1);
  const DLTensor *av = a != NULL ? spdl_tensor_dltensor(a) : NULL;
  CHECK(av != NULL && av->ndim == 2 && av->shape[1] == 5 && av->strides[0] == 5 && av->dtype.bits == 16,
        "spdl_tensor_alloc(3x5 uint16)");
  CHECK(a != NULL && spdl_shm_lend(a, off) == 1, "spdl_shm_lend of a tensor from spdl_tensor_alloc");
  spdl_tensor_decref(a);
  const int64_t bad[1] = {-1};
  CHECK(spdl_tensor_alloc(1, bad, kDLUInt, 8, 1) == NULL && spdl_tensor_alloc(1, shape, kDLUInt, 7, 1) == NULL,
        "spdl_tensor_alloc(a negative dimension, 7 bits) -> NULL");
  spdl_shm_unmap(m);
  if (fd >= 0) close(fd);
}

// put_frame writes one message as Python's multiprocessing.Connection does:
// a big-endian int32 length, then the bytes.
static void put_frame(int fd, const char *msg) {
  uint32_t n = (uint32_t)strlen(msg);
  uint8_t b[256] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
  memcpy(b + 4, msg, n);
  CHECK(write(fd, b, 4 + n) == (ssize_t)(4 + n), "a frame to the worker's end");
}

// get_frame reads one frame into b (cap bytes): its length, or -1.
static int get_frame(int fd, uint8_t *b, int cap) {
  uint8_t h[4];
  if (read(fd, h, 4) != 4) return -1;
  int n = (int)((uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3]);
  if (n > cap || read(fd, b, (size_t)n) != n) return -1;
  return n;
}

// check_serve serves a pipeline's tensors over a socket pair, as a worker
// process does (the arena from check_shm is in place): two credits, two
// lent tensors, a command handed back, then the rest after more credits.
static void check_serve(void) {
  static const char spec[] =
      "{\"source\": {\"kind\": \"range\", \"start\": 0, \"stop\": 3, \"step\": 1},"
      " \"stages\": [{\"kind\": \"pipe\", \"name\": \"t\", \"concurrency\": 1,"
      " \"op\": {\"kind\": \"native\", \"name\": \"to_tensor\", \"options\": {}}}]}";
  char *err = NULL;
  uint64_t h = 0;
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
  CHECK(spdl_pipeline_new(spec, sizeof spec - 1, &h, &err) == SPDL_OK && spdl_pipeline_start(h, &err) == SPDL_OK,
        "spdl_pipeline_new, start (to serve)");
  spdl_buf out = {NULL, 0};
  int64_t credits = 0;
  put_frame(sv[1], "c2");
  put_frame(sv[1], "qstats");
  int rc = spdl_pipeline_serve(h, sv[0], 10 * 1000 * 1000, &credits, &out, &err);
  CHECK(rc == SPDL_MESSAGE && out.len == 6 && memcmp(out.data, "qstats", 6) == 0 && credits == 0,
        "spdl_pipeline_serve: 2 items, then the parent's message back (rc %d, credits %" PRId64 ") %s", rc, credits,
        err ? err : "");
  spdl_free(out.data);
  out.data = NULL;
  uint8_t b[256];
  for (int i = 0; i < 2; i++) {
    int n = get_frame(sv[1], b, sizeof b);
    CHECK(n == 2 + 24 && b[0] == 'D' && b[1] == 1, "spdl_pipeline_serve: item %d is a lent tensor (%d bytes)", i, n);
  }
  rc = spdl_pipeline_serve(h, sv[0], 1000, &credits, &out, &err);
  CHECK(rc == SPDL_TIMEOUT, "spdl_pipeline_serve with no credits and no message -> SPDL_TIMEOUT (rc %d)", rc);
  put_frame(sv[1], "c5");
  rc = spdl_pipeline_serve(h, sv[0], 10 * 1000 * 1000, &credits, &out, &err);
  CHECK(rc == SPDL_END && credits == 4 && get_frame(sv[1], b, sizeof b) == 26,
        "spdl_pipeline_serve: the last item, then SPDL_END (rc %d, credits %" PRId64 ")", rc, credits);
  credits = 0;
  close(sv[1]);
  rc = spdl_pipeline_serve(h, sv[0], 10 * 1000 * 1000, &credits, &out, &err);
  CHECK(rc == SPDL_PEER && err != NULL, "spdl_pipeline_serve, the parent gone -> SPDL_PEER: %s",
        err ? err : "(no message)");
  spdl_free(err);
  err = NULL;
  close(sv[0]);
  CHECK(spdl_pipeline_free(h, -1, &err) == SPDL_OK, "spdl_pipeline_free (served)");
}

static void check_io(void) {
  char *err = NULL;
  spdl_buf out = {NULL, 0};
  static const uint8_t seven[9] = {'i', 7};
  spdl_tensor *t = seven_tensor();
  CHECK(t != NULL, "spdl_io_apply(to_tensor, 7) -> one tensor");
  spdl_tensor_decref(t);
  int rc;
  static const char bad[] = "{\"op\": {\"name\": \"no such op\"}}";
  out.data = NULL;
  rc = spdl_io_apply(bad, sizeof bad - 1, seven, sizeof seven, &out, &err);
  CHECK(rc == SPDL_INVALID && err != NULL && out.data == NULL, "spdl_io_apply(unknown op) -> SPDL_INVALID: %s",
        err ? err : "(no message)");
  spdl_free(err);
  err = NULL;
  static const char junk[] = "not a tar archive, not at all";
  EXPECT_ERROR("spdl_io_load(npy, junk)", spdl_io_load("npy", NULL, 0, junk, sizeof junk, &out, &err));
  static const char tensor_req[] = "{\"format\": \"png\"}";
  rc = spdl_io_encode_image(seven, sizeof seven, tensor_req, sizeof tensor_req - 1, &out, &err);
  CHECK(rc == SPDL_INVALID && err != NULL, "spdl_io_encode_image(an int) -> SPDL_INVALID: %s",
        err ? err : "(no message)");
  spdl_free(err);
}

static void check_pipeline(const char *dir) {
  static const char bad[] = "{\"source\": ";
  static const char spec[] =
      "{\"source\": {\"kind\": \"range\", \"start\": 0, \"stop\": 3, \"step\": 1},"
      " \"stages\": [{\"kind\": \"pipe\", \"name\": \"t\", \"concurrency\": 1,"
      " \"op\": {\"kind\": \"native\", \"name\": \"to_tensor\", \"options\": {}}}]}";
  char *err = NULL, *out = NULL;
  uint64_t h = 0;
  EXPECT_ERROR("spdl_pipeline_new(truncated JSON)", spdl_pipeline_new(bad, sizeof bad - 1, &h, &err));
  int rc = spdl_pipeline_new(spec, sizeof spec - 1, &h, &err);
  CHECK(rc == SPDL_OK && h != 0, "spdl_pipeline_new -> handle %" PRIu64 " %s", h, err ? err : "");
  spdl_free(err);
  err = NULL;
  if (rc != SPDL_OK) return;
  CHECK(spdl_pipeline_trace_start(h, 100, &err) == SPDL_OK, "spdl_pipeline_trace_start");
  CHECK(spdl_pipeline_start(h, &err) == SPDL_OK, "spdl_pipeline_start");
  int items = 0;
  for (;;) {
    spdl_buf b = {NULL, 0};
    rc = spdl_pipeline_next(h, 10 * 1000 * 1000, &b, &err);
    if (rc != SPDL_OK) break;
    spdl_tensor *t = take_tensor(&b);
    CHECK(t != NULL, "spdl_pipeline_next -> item %d is one tensor", items);
    if (t != NULL && items == 0) {
      check_tensor(t);
    } else if (t != NULL) {
      spdl_tensor_decref(t);
    }
    spdl_free(b.data);
    items++;
  }
  CHECK(rc == SPDL_END && items == 3, "spdl_pipeline_next -> 3 items then SPDL_END (rc %d) %s", rc,
        err ? err : "");
  spdl_free(err);
  err = NULL;
  rc = spdl_pipeline_stats(h, &out, &err);
  expect_json("spdl_pipeline_stats", rc, out, err, "{");
  out = err = NULL;
  rc = spdl_pipeline_source_state(h, &out, &err);
  expect_json("spdl_pipeline_source_state", rc, out, err, "null");
  out = err = NULL;
  rc = spdl_pipeline_failure(h, &out, &err);
  expect_json("spdl_pipeline_failure", rc, out, err, "null");
  out = err = NULL;
  char path[4096];
  snprintf(path, sizeof path, "%s/trace.json", dir);
  rc = spdl_pipeline_trace_write(h, path, &err);
  CHECK(rc == SPDL_OK, "spdl_pipeline_trace_write %s", err ? err : "");
  spdl_free(err);
  err = NULL;
  CHECK(spdl_pipeline_stop(h, &err) == SPDL_OK, "spdl_pipeline_stop");
  CHECK(spdl_pipeline_stop(h, &err) == SPDL_OK, "spdl_pipeline_stop twice");
  CHECK(spdl_pipeline_free(h, -1, &err) == SPDL_OK, "spdl_pipeline_free");
  spdl_free(err);
  err = NULL;
  EXPECT_ERROR("spdl_pipeline_start(freed)", spdl_pipeline_start(h, &err));
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "/tmp";
  char *err = NULL, *out = NULL;
  int rc;

  const char *v = spdl_version();
  CHECK(v != NULL && v[0] != '\0', "spdl_version -> %s", v ? v : "(null)");

  CHECK(spdl_init(NULL, NULL, NULL, &err) == SPDL_OK, "spdl_init(NULL callbacks)");
  spdl_set_python_api(NULL, NULL);
  spdl_set_python_thread_api(NULL, NULL, NULL, NULL);

  spdl_buf b = {NULL, 0};
  spdl_buf_set(&b, "abc", 3);
  CHECK(b.data != NULL && b.len == 3 && memcmp(b.data, "abc", 3) == 0, "spdl_buf_set");
  spdl_free(b.data);
  spdl_free(NULL);

  rc = spdl_ops(&out, &err);
  expect_json("spdl_ops", rc, out, err, "\"to_tensor\"");
  out = err = NULL;

  static const char junk[] = "not a media file";
  EXPECT_ERROR("spdl_probe(junk bytes)", spdl_probe(NULL, junk, sizeof junk, &out, &err));

  static const char req[] = "{\"op\": \"no such op\"}";
  EXPECT_ERROR("spdl_sampler_call(unknown op)", spdl_sampler_call(req, sizeof req - 1, &out, &err));

  static const char stage[] = "{\"kind\": \"pipe\", \"concurrency\": \"auto\", \"max_concurrency\": 4}";
  CHECK(spdl_spec_check("stage", stage, sizeof stage - 1, &err) == SPDL_OK, "spdl_spec_check(stage) %s",
        err ? err : "");
  spdl_free(err);
  err = NULL;
  static const char settings[] = "{\"buffer_size\": 0}";
  EXPECT_ERROR("spdl_spec_check(buffer_size 0)", spdl_spec_check("pipeline", settings, sizeof settings - 1, &err));

  rc = spdl_cuda_status(NULL, &out, &err);
  expect_json("spdl_cuda_status", rc, out, err, "\"available\"");
  out = err = NULL;

  check_handle_zero();
  check_pipeline(dir);
  check_io();
  check_shm();
  check_serve();

  rc = spdl_mem_stats(&out, &err);
  expect_json("spdl_mem_stats", rc, out, err, "\"live_tensors\"");
  out = err = NULL;
  spdl_mem_set_pool_limit(1 << 20);
  spdl_mem_trim();
  rc = spdl_cuda_mem_stats(&out, &err);
  expect_json("spdl_cuda_mem_stats", rc, out, err, "\"reuse_waits\"");
  out = err = NULL;
  spdl_cuda_mem_trim();
  CHECK(spdl_arrow_allocated_bytes() >= 0, "spdl_arrow_allocated_bytes");

  // Without the Python API installed the destructors read no capsule.
  spdl_dlpack_capsule_destructor(NULL);
  spdl_arrow_schema_capsule_destructor(NULL);
  spdl_arrow_array_capsule_destructor(NULL);
  spdl_arrow_free(NULL, NULL);
  CHECK(1, "capsule destructors and spdl_arrow_free with nothing to free");

  printf("%d failed\n", failures);
  return failures != 0;
}
