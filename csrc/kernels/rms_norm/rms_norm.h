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
//
// A call is planned once (rms_norm_fwd_plan / rms_norm_bwd_plan: which kernel,
// its launch shape and the backward's workspace), then launched with that plan.
// Which kernel runs for which shape, and why: docs/kernels/rms_norm.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/common/device_info.h"
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
  float* workspace;  // the plan's workspace_floats floats (dW partials)
  int64_t rows, cols;
  float offset;
  RmsCasting casting;
  DType x_dtype, w_dtype, y_dtype;
};

// The forward kernels (by mechanism).
enum class RmsFwdKernel : int {
  kNone,     // nothing to launch: no rows, or a dtype combination the kernels do not take
  kFixed,    // rms_fwd_fixed: torch.compile's skeleton, the width a compile-time constant
  kFixedRt,  // rms_fwd_fixed_rt: the same skeleton, the width a run-time value
  kCached,   // rms_fwd_cached: rows held in registers, several rows a block
  kL2Hint,   // rms_fwd_l2hint: a 1024-thread block a row, read twice under L2 eviction hints
  kGeneric,  // rms_fwd_generic: any width and alignment, a block a row
};

struct RmsNormFwdPlan {
  RmsFwdKernel kernel = RmsFwdKernel::kNone;
  int vec = 1;                 // elements a vector access: 16 bytes of x, or 1 (unaligned rows)
  int threads = 0;             // blockDim.x
  int rows_per_block = 1;      // blockDim.y (kCached)
  int vectors_per_thread = 0;  // kCached: 2 or 4
  bool reg_capped = false;     // kCached: the register-capped build
  bool l1_hints = false;       // kL2Hint: L1 eviction priorities too
  bool stash = false;          // kGeneric: the row kept in shared memory between its two passes
  size_t smem = 0;             // dynamic shared memory bytes
  int64_t grid = 0;            // blocks
};

// The backward kernels (by mechanism).
enum class RmsBwdKernel : int {
  kNone,       // nothing to launch: no rows, or a dtype combination the kernels do not take
  kTma,        // rms_bwd_tma: rows brought into shared-memory stages by TMA bulk copies (sm_90)
  kPipeRegs,   // rms_bwd_pipe, the next row fetched into registers
  kPipeAsync,  // rms_bwd_pipe, rows fetched ahead by cp.async into shared memory
  kCluster,    // rms_bwd_cluster: a row split over a thread-block cluster (sm_90)
  kCached,     // rms_bwd_cached: rows in registers, 4 vectors a thread
  kGeneric,    // rms_bwd_dx_generic + rms_bwd_dw_generic: any width and alignment
};

struct RmsNormBwdPlan {
  RmsBwdKernel kernel = RmsBwdKernel::kNone;
  int vec = 1;                   // elements a vector access (kGeneric: 1 for unaligned rows)
  int threads = 0;               // blockDim.x
  int rows_per_block = 1;        // blockDim.y (kPipe*, kCached)
  int stages = 0;                // kTma: rows in flight a block
  int rows_a_stage = 1;          // kTma: rows a stage (1 or 2)
  int cluster = 0;               // kCluster: blocks a cluster
  int rows_a_message = 1;        // kCluster: rows a row-sum message (1 or 2)
  int max_threads = 1024;        // kCluster: the build's __launch_bounds__ (768 or 1024)
  bool dw_in_smem = false;       // kCached: dW partials in shared memory (1024-thread rows)
  size_t smem = 0;               // dynamic shared memory bytes
  int64_t grid = 0;              // blocks (kCluster: clusters; kGeneric: dW row splits); dW partial rows
  int64_t workspace_floats = 0;  // fp32 scratch the call needs (0 without dW)
};

// Pure host functions of the arguments (and, for the backward, the device: occupancy and
// whether the sm_90 kernels run here, both queried once per device and kernel and cached).
// The developer override (plan_override.h, keys rms_fwd / rms_bwd) forces a kernel where it runs.
RmsNormFwdPlan rms_norm_fwd_plan(const RmsNormFwdArgs& a);
RmsNormBwdPlan rms_norm_bwd_plan(const RmsNormBwdArgs& a, const DeviceInfo& dev);

// Launch a call as planned for exactly these arguments (a.workspace: plan.workspace_floats floats).
cudaError_t rms_norm_fwd(const RmsNormFwdArgs& a, const RmsNormFwdPlan& plan, cudaStream_t stream);
cudaError_t rms_norm_bwd(const RmsNormBwdArgs& a, const RmsNormBwdPlan& plan, cudaStream_t stream);

}  // namespace liger_cpp::kernels
