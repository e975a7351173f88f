// ReLU squared (Nemotron's "relu2", Liger's LigerReLUSquaredFunction) CUDA kernels: plain-C++
// interface (raw pointers, sizes, a stream).
//
//   forward   y  = relu(x)^2                 (fp32 math, one rounding to x's dtype)
//   backward  dx = dy * 2 * relu(x)          (fp32 math, one rounding; dx may alias dy)
// Every tensor is dense (contiguous) with n elements.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/dtype.h"

namespace liger_cpp::kernels {

struct ReluSquaredArgs {
  const void* x;
  const void* dy;  // backward only (nullptr in the forward)
  void* out;       // y (forward) or dx (backward); never aliases x
  int64_t n;
  DType dtype;  // of every tensor
};

// The launch of one call: 16-byte vectors or one element an access, and the grid (a grid-stride
// loop over the elements, so any n up to 2^63 runs with int64 indices).
struct ReluSquaredPlan {
  bool vec;
  int64_t grid;  // blocks of kReluSquaredThreads
};

inline constexpr int kReluSquaredThreads = 256;

// Pure host plan: from n, the element size, whether every pointer is 16-byte aligned and the SM
// count. (Testable without a GPU; relu_squared_launch calls it once per call.)
ReluSquaredPlan plan_relu_squared(int64_t n, int elem_size, bool aligned, int sm_count);

cudaError_t relu_squared_fwd(const ReluSquaredArgs& a, int sm_count, cudaStream_t stream);
cudaError_t relu_squared_bwd(const ReluSquaredArgs& a, int sm_count, cudaStream_t stream);

}  // namespace liger_cpp::kernels
