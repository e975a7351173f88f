// LayerNorm backward entry point: the plan's kernel, then the fixed-order
// reduction of its dW / dB partial rows (reduce_partials.cuh). The kernel
// families are in layer_norm_bwd_*.cu; this file's CUDA module holds only the
// reduction.
#include "kernels/layer_norm/layer_norm_impl.h"
#include "kernels/norm/reduce_partials.cuh"

namespace liger_cpp::kernels {

cudaError_t layer_norm_bwd(const LayerNormBwdArgs& a, const LayerNormBwdPlan& p, cudaStream_t stream) {
  if (a.rows == 0) {
    const int64_t bytes = a.cols * dtype_size(a.w_dtype);
    if (a.dw) {
      const cudaError_t e = cudaMemsetAsync(a.dw, 0, bytes, stream);
      if (e != cudaSuccess) return e;
    }
    if (a.db) return cudaMemsetAsync(a.db, 0, bytes, stream);
    return cudaSuccess;
  }
  namespace impl = layer_norm_impl;
  // The workspace: dW's partial rows, then dB's.
  float* pw = a.dw ? a.workspace : nullptr;
  float* pb = a.db ? a.workspace + (a.dw ? p.partial_rows * a.cols : 0) : nullptr;
  cudaError_t err = cudaErrorInvalidValue;
  switch (p.kernel) {
    case LnBwdKernel::kTma:
      err = impl::launch_bwd_tma(a, p, pw, pb, stream);
      break;
    case LnBwdKernel::kPipe16:
      err = impl::launch_bwd_pipe16(a, p, pw, pb, stream);
      break;
    case LnBwdKernel::kPipe:
      err = impl::launch_bwd_pipe(a, p, pw, pb, stream);
      break;
    case LnBwdKernel::kGeneric:
      err = impl::launch_bwd_generic(a, p, pw, pb, stream);
      break;
    case LnBwdKernel::kNone:
      break;
  }
  if (err != cudaSuccess || (pw == nullptr && pb == nullptr)) return err;
  return dispatch_dtype(a.w_dtype, [&](auto wt) {
    using WT = decltype(wt);
    WT* dw = static_cast<WT*>(a.dw);
    WT* db = static_cast<WT*>(a.db);
    if (p.kernel != LnBwdKernel::kGeneric) {
      // Rows of whole 4-element vectors: the float4 reduction, launched with PDL
      // (launch_reduce_partials falls back by itself otherwise).
      return launch_reduce_partials<WT>(pw, dw, pb, db, p.partial_rows, a.cols, stream);
    }
    const dim3 rgrid(static_cast<unsigned>(ceil_div(a.cols, 32)));
    if (pw) reduce_partials<WT><<<rgrid, dim3(32, 16), 0, stream>>>(pw, p.partial_rows, a.cols, dw);
    if (pb) reduce_partials<WT><<<rgrid, dim3(32, 16), 0, stream>>>(pb, p.partial_rows, a.cols, db);
    return cudaGetLastError();
  });
}

}  // namespace liger_cpp::kernels
