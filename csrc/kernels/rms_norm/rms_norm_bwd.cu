// RMSNorm / FusedAddRMSNorm backward entry point: the plan's kernel, then the
// fixed-order reduction of its dW partial rows (reduce_partials.cuh, launched
// with PDL after the backward). The kernel families are in rms_norm_bwd_*.cu;
// this file's CUDA module holds only the reduction.
#include "kernels/norm/reduce_partials.cuh"
#include "kernels/rms_norm/rms_norm_impl.h"

namespace liger_cpp::kernels {

cudaError_t rms_norm_bwd(const RmsNormBwdArgs& a, const RmsNormBwdPlan& p, cudaStream_t stream) {
  if (a.rows == 0) {
    if (a.dw) return cudaMemsetAsync(a.dw, 0, a.cols * dtype_size(a.w_dtype), stream);
    return cudaSuccess;
  }
  namespace impl = rms_norm_impl;
  float* partial = a.dw ? a.workspace : nullptr;
  cudaError_t err = cudaErrorInvalidValue;
  switch (p.kernel) {
    case RmsBwdKernel::kTma:
      err = impl::launch_bwd_tma(a, p, partial, stream);
      break;
    case RmsBwdKernel::kPipeRegs:
    case RmsBwdKernel::kPipeAsync:
      err = impl::launch_bwd_pipe(a, p, partial, stream);
      break;
    case RmsBwdKernel::kCluster:
      err = impl::launch_bwd_cluster(a, p, partial, stream);
      break;
    case RmsBwdKernel::kCached:
      err = impl::launch_bwd_cached(a, p, partial, stream);
      break;
    case RmsBwdKernel::kGeneric:
      err = impl::launch_bwd_generic(a, p, partial, stream);
      break;
    case RmsBwdKernel::kNone:
      break;
  }
  if (err != cudaSuccess || partial == nullptr) return err;
  // One partial row a block (a cluster for kCluster; a row split for kGeneric): p.grid rows.
  return dispatch_dtype(a.w_dtype, [&](auto wt) {
    using WT = decltype(wt);
    return launch_reduce_partials<WT>(partial, static_cast<WT*>(a.dw), nullptr, nullptr, p.grid, a.cols,
                                      stream);
  });
}

}  // namespace liger_cpp::kernels
