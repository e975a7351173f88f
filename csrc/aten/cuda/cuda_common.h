// Helpers for the CUDA host wrappers (ATen side).
#pragma once

#include <ATen/cuda/CUDAContext.h>

#include <cstdint>

#include "aten/checks/common.h"
#include "kernels/common/device_info.h"
#include "kernels/common/dtype.h"

#define LIGER_CUDA_CHECK(expr)                                                   \
  do {                                                                           \
    const cudaError_t liger_err_ = (expr);                                       \
    if (liger_err_ != cudaSuccess)                                               \
      LIGER_FAIL("CUDA error in ", #expr, ": ", cudaGetErrorString(liger_err_)); \
  } while (0)

namespace liger_cpp {

inline kernels::DType to_kernel_dtype(at::ScalarType t, const char* name) {
  switch (t) {
    case at::kFloat:
      return kernels::DType::kFloat32;
    case at::kHalf:
      return kernels::DType::kFloat16;
    case at::kBFloat16:
      return kernels::DType::kBFloat16;
    default:
      LIGER_FAIL("argument '", name, "': expected float32, float16 or bfloat16 on CUDA, got ", dtype_str(t));
  }
}

// Multiprocessor count of the current device (cached by ATen).
inline int sm_count() { return at::cuda::getCurrentDeviceProperties()->multiProcessorCount; }

// Whether a pointer allows the kernels' 16-byte vector accesses.
inline bool aligned_16B(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// What the kernels' launch plans know of the current device.
inline kernels::DeviceInfo device_info() { return kernels::DeviceInfo{sm_count()}; }

}  // namespace liger_cpp
