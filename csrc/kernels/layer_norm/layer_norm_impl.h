// Internal to the LayerNorm kernels: what the plan (layer_norm_plan.cu), the
// entry points (layer_norm_fwd.cu, layer_norm_bwd.cu) and the kernel families'
// files share. Each family's kernels live in their own .cu file, i.e. their own
// CUDA module (CUDA loads a module whole on the first use of one of its
// kernels, so a call only loads the families it runs). A family file exports
// its launcher (the plan's kernel, dtypes dispatched) and, where the plan asks
// the device about occupancy, the kernel the plan would launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/layer_norm/layer_norm.h"

namespace liger_cpp::kernels::layer_norm_impl {

// ln_bwd_tma: threads a block at most (rows of at most 512 16-byte vectors)
// and rows in flight a block.
inline constexpr int kTmaBlock = 512;
inline constexpr int kTmaStages = 4;
// ln_bwd_pipe16: threads a block (two blocks a SM at 64 registers) and its
// cp.async stages (3 rows in flight).
inline constexpr int kPipe16Block = 512;
inline constexpr int kPipe16Stages = 4;
// ln_bwd_pipe: threads a block (one a SM).
inline constexpr int kPipeBlock = 1024;

// Where (x, w) is a dtype combination the kernels take: w is x's dtype or
// float32 (either when x is float32).
inline bool valid_dtypes(DType x, DType w) { return w == x || w == DType::kFloat32 || x == DType::kFloat32; }

cudaError_t launch_fwd_cached(const LayerNormFwdArgs& a, const LayerNormFwdPlan& p, cudaStream_t s);
cudaError_t launch_fwd_generic(const LayerNormFwdArgs& a, const LayerNormFwdPlan& p, cudaStream_t s);

// The kernel each plan would launch (nullptr for dtypes the kernels do not take), for its
// occupancy queries.
const void* bwd_tma_kernel(DType x, DType w);
const void* bwd_pipe16_kernel(DType x, DType w);

// pw / pb: the dW / dB partial rows, nullptr where not wanted.
cudaError_t launch_bwd_tma(const LayerNormBwdArgs& a, const LayerNormBwdPlan& p, float* pw, float* pb,
                           cudaStream_t s);
cudaError_t launch_bwd_pipe16(const LayerNormBwdArgs& a, const LayerNormBwdPlan& p, float* pw, float* pb,
                              cudaStream_t s);
cudaError_t launch_bwd_pipe(const LayerNormBwdArgs& a, const LayerNormBwdPlan& p, float* pw, float* pb,
                            cudaStream_t s);
cudaError_t launch_bwd_generic(const LayerNormBwdArgs& a, const LayerNormBwdPlan& p, float* pw, float* pb,
                               cudaStream_t s);

}  // namespace liger_cpp::kernels::layer_norm_impl
