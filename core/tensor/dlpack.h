/*
 * dlpack.h: the DLPack v1.0 data-exchange ABI, as spdl-go uses it.
 *
 * Written for spdl-go from the DLPack specification (https://dmlc.github.io/dlpack/).
 * The struct layouts and enumeration values below are the ABI and must match
 * the specification exactly; everything else is ours. The include guard is
 * the upstream one on purpose: a translation unit that includes both this
 * file and upstream's dlpack.h gets only the first, and the two are
 * layout-identical.
 */
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 0

/* Version of a DLManagedTensorVersioned. A consumer must not read anything
 * but the deleter of a struct whose major version it does not know. */
typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

/* Device kinds. spdl-go produces and accepts only kDLCPU. */
typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
  kDLMAIA = 17,
} DLDeviceType;

typedef struct {
  DLDeviceType device_type; /* 32-bit enum */
  int32_t device_id;        /* 0 for CPU memory */
} DLDevice;

/* Element kinds (DLDataType.code). */
typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U,
} DLDataTypeCode;

/* Element type: float32 is {kDLFloat, 32, 1}; bool is {kDLBool, 8, 1}. */
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

/* A view of n-dimensional memory; it owns nothing. The first element is at
 * (char*)data + byte_offset. shape and strides hold ndim entries; strides
 * are in elements, and NULL strides (allowed before v1.2) mean compact
 * row-major. */
typedef struct {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} DLTensor;

/* Pre-v1.0 managed tensor (capsule name "dltensor"). The consumer calls
 * deleter(self) exactly once when done; the deleter frees self too. */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensor* self);
} DLManagedTensor;

/* DLManagedTensorVersioned.flags bits. */
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)

/* v1.0 managed tensor (capsule name "dltensor_versioned"). The fields up to
 * and including flags keep their place in every future version, so a
 * consumer can always call the deleter. */
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* DLPACK_DLPACK_H_ */
