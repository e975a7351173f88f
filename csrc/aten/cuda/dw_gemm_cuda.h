// The chunk loops' weight-gradient GEMM on CUDA through cuBLASLt with a chosen algorithm (see
// dw_gemm_cuda.cpp for the rule and why).
#pragma once

#include <ATen/ATen.h>

namespace liger_cpp::cuda {

// dw[V, H] = g[R, V]^T x[R, H] (accumulate: dw += ...), float32 accumulation, one rounding to dw's
// dtype. Returns false, having queued nothing, where the rule does not apply (the caller runs ATen's
// GEMM instead): not 16-bit, not sm_90, too many rows, unaligned rows, or no such algorithm.
bool dw_gemm_lt(const at::Tensor& dw, const at::Tensor& g, const at::Tensor& x, bool accumulate);

}  // namespace liger_cpp::cuda
