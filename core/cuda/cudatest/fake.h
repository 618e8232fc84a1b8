#ifndef SPDL_CUDATEST_FAKE_H_
#define SPDL_CUDATEST_FAKE_H_

#include <stddef.h>
#include <stdint.h>

enum {
  FAKE_HOST_ALLOC, FAKE_FREE_HOST, FAKE_MALLOC, FAKE_FREE, FAKE_STREAMS, FAKE_SYNCS,
  FAKE_COPIES, FAKE_COPY_BYTES, FAKE_EVENTS, FAKE_RECORDS, FAKE_WAITS, FAKE_NCOUNTS
};

void fake_reset(int ndevices);
long long fake_count(int which);
void fake_fail_next(int which);
uintptr_t fake_symbol(const char* name);
int fake_cudaStreamCreateWithFlags(void** s, unsigned int flags);

#endif
