// RMSNorm CUDA kernels: plain-C++ interface (raw pointers, sizes, a stream).
//
//   rstd = 1 / sqrt(mean(x^2) + eps)                       (fp32, saved)
//   llama: y = round_to_x_dtype(x * rstd) * (w + offset)    (HF LlamaRMSNorm)
//   gemma: y = (x * rstd) * (w + offset), fp32 throughout  (HF GemmaRMSNorm)
//   none : like gemma (no intermediate casts)
// Backward, with m = dy * (w + offset):
//   dx = rstd * m - rstd^3 * x * mean(m * x)
//   dw = sum_rows dy * xn, xn = x * rstd (rounded to x's dtype in llama mode)
// FusedAddRMSNorm uses the same entry points: with `res` set, the forward
// normalises s = round_to_x_dtype(x + res) and writes s; with `ds_out` set,
// the backward (called with s as x) adds ds_out to dx (dx = ds).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/common/dtype.h"

namespace liger_cpp::kernels {

enum class RmsCasting : int { kLlama = 0, kGemma = 1, kNone = 2 };

struct RmsNormFwdArgs {
  const void* x;  // [rows, cols], row stride x_row_stride, unit column stride
  int64_t x_row_stride;
  const void* res;  // FusedAddRMSNorm: residual [rows, cols] of x_dtype, or nullptr
  int64_t res_row_stride;
  void* s;        // FusedAddRMSNorm: x + res [rows, cols] of x_dtype, contiguous
  const void* w;  // [cols] or nullptr (no affine weight)
  void* y;        // [rows, cols], contiguous
  float* rstd;    // [rows]
  int64_t rows, cols;
  float eps, offset;
  RmsCasting casting;
  DType x_dtype, w_dtype, y_dtype;
};

struct RmsNormBwdArgs {
  const void* dy;  // [rows, cols] of y_dtype, row stride dy_row_stride
  int64_t dy_row_stride;
  const void* x;
  int64_t x_row_stride;
  const void* w;       // [cols] or nullptr
  const float* rstd;   // [rows]
  const void* ds_out;  // FusedAddRMSNorm: gradient into s [rows, cols] of x_dtype, or nullptr
  int64_t ds_out_row_stride;
  void* dx;  // [rows, cols] of x_dtype; may alias dy (in place)
  int64_t dx_row_stride;
  void* dw;          // [cols] of w_dtype, or nullptr when dW is not wanted
  float* workspace;  // rms_norm_bwd_workspace_floats() floats
  int64_t rows, cols;
  float offset;
  RmsCasting casting;
  DType x_dtype, w_dtype, y_dtype;
};

// Number of fp32 scratch elements rms_norm_bwd needs (per-block dW partials).
int64_t rms_norm_bwd_workspace_floats(const RmsNormBwdArgs& a, int sm_count);

cudaError_t rms_norm_fwd(const RmsNormFwdArgs& a, cudaStream_t stream);
cudaError_t rms_norm_bwd(const RmsNormBwdArgs& a, int sm_count, cudaStream_t stream);

}  // namespace liger_cpp::kernels
