// LayerNorm CUDA kernels: plain-C++ interface (raw pointers, sizes, a stream).
//
//   mean = mean(x), rstd = 1 / sqrt(mean((x - mean)^2) + eps)   (fp32, saved;
//   two passes over the row held in registers or shared memory)
//   y = (x - mean) * rstd * w + b                               (fp32 math)
// Backward, with xhat = (x - mean) * rstd and g = dy * w:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//   dw = sum_rows dy * xhat, db = sum_rows dy  (per-block fp32 partials, then
//   a fixed-order reduction: deterministic, no atomics)
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/dtype.h"

namespace liger_cpp::kernels {

struct LayerNormFwdArgs {
  const void* x;  // [rows, cols], row stride x_row_stride, unit column stride
  int64_t x_row_stride;
  const void* w;  // [cols] of w_dtype, or nullptr
  const void* b;  // [cols] of w_dtype, or nullptr
  void* y;        // [rows, cols] of x_dtype, contiguous
  float* mean;    // [rows]
  float* rstd;    // [rows]
  int64_t rows, cols;
  float eps;
  DType x_dtype, w_dtype;  // w_dtype: x_dtype or float32 (either when x is float32)
};

struct LayerNormBwdArgs {
  const void* dy;  // [rows, cols] of x_dtype
  int64_t dy_row_stride;
  const void* x;
  int64_t x_row_stride;
  const void* w;  // [cols] or nullptr
  const float* mean;
  const float* rstd;
  void* dx;          // [rows, cols] of x_dtype, contiguous
  void* dw;          // [cols] of w_dtype, or nullptr when not wanted
  void* db;          // [cols] of w_dtype, or nullptr when not wanted
  float* workspace;  // layer_norm_bwd_workspace_floats() floats
  int64_t rows, cols;
  // w_dtype: W's, or without W the dtype dB is written in (float32 for 16-bit
  // x: the bias it belongs to may be wider than x); the kernels read W as it.
  DType x_dtype, w_dtype;
};

int64_t layer_norm_bwd_workspace_floats(const LayerNormBwdArgs& a, int sm_count);

cudaError_t layer_norm_fwd(const LayerNormFwdArgs& a, cudaStream_t stream);
cudaError_t layer_norm_bwd(const LayerNormBwdArgs& a, int sm_count, cudaStream_t stream);

}  // namespace liger_cpp::kernels
