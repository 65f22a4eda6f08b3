// The DLPack ABI (v0.6: DLManagedTensor, no versioning), which torch 1.13 and
// 2.x both accept through torch.utils.dlpack.from_dlpack(capsule).
// Debian's libdlpack-dev provides the header; where it is not installed the
// structs are declared here from the public specification
// (https://dmlc.github.io/dlpack/latest/c_api.html). The layout is the ABI,
// so the two are interchangeable.
#pragma once

#if __has_include(<dlpack/dlpack.h>)
#include <dlpack/dlpack.h>
#else
#include <cstdint>

extern "C" {
typedef enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 } DLDeviceType;
typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;
typedef enum { kDLInt = 0U, kDLUInt = 1U, kDLFloat = 2U } DLDataTypeCode;
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;
typedef struct {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // null: compact row-major
  uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensor* self);
} DLManagedTensor;
}
#endif
