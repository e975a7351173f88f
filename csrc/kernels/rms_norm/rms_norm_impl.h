// Internal to the RMSNorm kernels: what the plan (rms_norm_plan.cu), the
// entry points (rms_norm_fwd.cu, rms_norm_bwd.cu) and the kernel families'
// files share. Each family's kernels live in their own .cu file, i.e. their own
// CUDA module (CUDA loads a module whole on the first use of one of its
// kernels, so a call only loads the families it runs). A family file exports
// its launcher (the plan's kernel, dtypes dispatched) and, where the plan asks
// the device about occupancy, the kernel the plan would launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/rms_norm/rms_norm.h"

namespace liger_cpp::kernels::rms_norm_impl {

// rms_fwd_cached's register-capped build (plan.reg_capped): 40 registers.
inline constexpr int kFwdRegCap = 40;
// rms_fwd_fixed: the widths with a compile-time build, and its threads a row
// (256 for 8 KiB rows, 512 for 16 and 32 KiB).
constexpr bool is_fixed_width(int64_t cols) { return cols == 4096 || cols == 8192 || cols == 16384; }
constexpr int fixed_threads(int64_t row_bytes) { return row_bytes <= 8192 ? 256 : 512; }
// rms_fwd_fixed_rt: rows of kFixedRtMinVec..kFixedRtMaxVec 16-byte vectors, its
// 16-byte accesses a thread (at most 683 threads a row).
inline constexpr int64_t kFixedRtMinVec = 129;
inline constexpr int64_t kFixedRtMaxVec = 2048;
inline constexpr int kFixedRtAccesses = 3;

// rms_bwd_tma: rows in flight a block (the plan's stages), the most the kernel
// has mbarriers for, and the row widths it takes, in 16-byte vectors.
inline constexpr int kTmaStages = 4;
inline constexpr int kTmaMaxStages = 8;
inline constexpr int64_t kTmaMinVec = 64;       // forced (plan override rms_bwd=tma)
inline constexpr int64_t kTmaAutoMinVec = 129;  // the plan's own choice
// Bytes of one operand's row in a TMA stage: rounded up to 128 so that every
// operand of every stage starts 128-byte aligned (the backward's fp32 dy
// vectors are 32 bytes; its x rows may be an odd number of 16-byte vectors).
__host__ __device__ constexpr uint32_t tma_row_region(int64_t row_bytes) {
  return static_cast<uint32_t>((row_bytes + 127) / 128 * 128);
}

// rms_bwd_pipe's shared-memory stages with cp.async (kPipeAsync).
inline constexpr int kPipeStages = 4;

// rms_bwd_cluster: the largest (portable) cluster.
inline constexpr int kWideMaxCluster = 8;

// Where (x, w, y) is a dtype combination the kernels take: those the ops pass (aten/checks/common.h:
// check_norm_inputs, rms_norm_out_dtype): w of x's dtype or float32 (any with float32 x); y of x's
// dtype, or float32 beside a float32 w (llama's promotion of a 16-bit x). A 16-bit x and w with a
// float32 y never comes, and no kernel is built for it.
inline bool valid_dtypes(DType x, DType w, DType y) {
  const bool w_ok = w == x || w == DType::kFloat32 || x == DType::kFloat32;
  const bool y_ok = y == x || (y == DType::kFloat32 && w == DType::kFloat32);
  return w_ok && y_ok;
}

// ---- forward families ----
cudaError_t launch_fwd_fixed(const RmsNormFwdArgs& a, const RmsNormFwdPlan& p,
                             cudaStream_t s);  // kFixed, kFixedRt
cudaError_t launch_fwd_cached(const RmsNormFwdArgs& a, const RmsNormFwdPlan& p, cudaStream_t s);
cudaError_t launch_fwd_l2hint(const RmsNormFwdArgs& a, const RmsNormFwdPlan& p, cudaStream_t s);
cudaError_t launch_fwd_generic(const RmsNormFwdArgs& a, const RmsNormFwdPlan& p, cudaStream_t s);

// ---- backward families: `partial` is the dW partial rows (nullptr without dW) ----
// The kernel each plan would launch (nullptr for dtypes the kernels do not take), for its
// occupancy queries; (x, w, y) are the call's dtypes, w's as the launch dispatches it.
const void* bwd_tma_kernel(DType x, DType w, DType y, int rows_a_stage);
const void* bwd_pipe_kernel(DType x, DType w, DType y, bool async, bool ds);
const void* bwd_cluster_kernel(DType x, DType w, DType y, bool ds, int rows_a_message, int max_threads);
const void* bwd_cached_kernel(DType x, DType w, DType y, bool dw_in_smem, bool ds);

cudaError_t launch_bwd_tma(const RmsNormBwdArgs& a, const RmsNormBwdPlan& p, float* partial, cudaStream_t s);
cudaError_t launch_bwd_pipe(const RmsNormBwdArgs& a, const RmsNormBwdPlan& p, float* partial, cudaStream_t s);
cudaError_t launch_bwd_cluster(const RmsNormBwdArgs& a, const RmsNormBwdPlan& p, float* partial,
                               cudaStream_t s);
cudaError_t launch_bwd_cached(const RmsNormBwdArgs& a, const RmsNormBwdPlan& p, float* partial,
                              cudaStream_t s);
cudaError_t launch_bwd_generic(const RmsNormBwdArgs& a, const RmsNormBwdPlan& p, float* partial,
                               cudaStream_t s);

}  // namespace liger_cpp::kernels::rms_norm_impl
