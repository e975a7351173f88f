// LayerNorm CUDA kernels: plain-C++ interface (raw pointers, sizes, a stream).
//
//   mean = mean(x), rstd = 1 / sqrt(mean((x - mean)^2) + eps)   (fp32, saved;
//   two passes over the row held in registers or shared memory)
//   y = (x - mean) * rstd * w + b                               (fp32 math)
// Backward, with xhat = (x - mean) * rstd and g = dy * w:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//   dw = sum_rows dy * xhat, db = sum_rows dy  (per-block fp32 partials, then
//   a fixed-order reduction: deterministic, no atomics)
//
// A call is planned once (layer_norm_fwd_plan / layer_norm_bwd_plan: which
// kernel, its launch shape and the backward's workspace), then launched with
// that plan. Which kernel runs for which shape, and why: docs/kernels/layer_norm.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/common/device_info.h"
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
  float* workspace;  // the plan's workspace_floats floats (dW then dB partial rows)
  int64_t rows, cols;
  // w_dtype: W's, or without W the dtype dB is written in (float32 for 16-bit
  // x: the bias it belongs to may be wider than x); the kernels read W as it.
  DType x_dtype, w_dtype;
};

// The forward kernels (by mechanism).
enum class LnFwdKernel : int {
  kNone,     // nothing to launch: no rows, or a dtype combination the kernels do not take
  kCached,   // ln_fwd_cached: rows held in registers
  kGeneric,  // ln_fwd_generic: any width and alignment, a block a row
};

struct LayerNormFwdPlan {
  LnFwdKernel kernel = LnFwdKernel::kNone;
  int vec = 1;             // elements a vector access: 16 bytes of x, or 1 (unaligned rows)
  int threads = 0;         // blockDim.x
  int rows_per_block = 1;  // blockDim.y (kCached)
  bool stash = false;      // kGeneric: the row kept in shared memory between its passes
  size_t smem = 0;         // dynamic shared memory bytes
  int64_t grid = 0;        // blocks
};

// The backward kernels (by mechanism).
enum class LnBwdKernel : int {
  kNone,     // nothing to launch: no rows, or a dtype combination the kernels do not take
  kTma,      // ln_bwd_tma: rows brought into shared-memory stages by TMA bulk copies (sm_90)
  kPipe16,   // ln_bwd_pipe16: 16-byte vectors, rows fetched ahead by cp.async
  kPipe,     // ln_bwd_pipe: 8-byte (4-element) vectors, rows fetched ahead into registers
  kGeneric,  // ln_bwd_dx_generic + ln_bwd_dwdb_generic: any width and alignment
};

struct LayerNormBwdPlan {
  LnBwdKernel kernel = LnBwdKernel::kNone;
  int vec = 1;                   // elements a vector access
  int threads = 0;               // blockDim.x
  int rows_per_block = 1;        // blockDim.y (kPipe16, kPipe)
  int vectors_per_thread = 1;    // kPipe: 1 or 2 (16-bit rows above 4096 elements)
  bool paired = false;           // kTma: clusters of two blocks, one partial row a pair
  size_t smem = 0;               // dynamic shared memory bytes
  int64_t grid = 0;              // blocks (kGeneric: dW/dB row splits)
  int64_t partial_rows = 0;      // fp32 partial rows of dW and of dB
  int64_t workspace_floats = 0;  // fp32 scratch the call needs (0 without dW and dB)
};

// Pure host functions of the arguments (and, for the backward, the device: occupancy and
// whether the sm_90 kernel runs here, both queried once per device and kernel and cached).
// The developer override (plan_override.h, key ln_bwd) forces a backward where it runs.
LayerNormFwdPlan layer_norm_fwd_plan(const LayerNormFwdArgs& a);
LayerNormBwdPlan layer_norm_bwd_plan(const LayerNormBwdArgs& a, const DeviceInfo& dev);

// Launch a call as planned for exactly these arguments (a.workspace: plan.workspace_floats floats).
cudaError_t layer_norm_fwd(const LayerNormFwdArgs& a, const LayerNormFwdPlan& plan, cudaStream_t stream);
cudaError_t layer_norm_bwd(const LayerNormBwdArgs& a, const LayerNormBwdPlan& plan, cudaStream_t stream);

}  // namespace liger_cpp::kernels
