// RMSNorm forward for rows above 2048 16-byte vectors (bf16 hidden > 16K),
// rms_fwd_l2hint; plain RMSNorm only (FusedAddRMSNorm's wide rows take the
// cached or generic forward). docs/kernels/rms_norm.md.
#include "kernels/rms_norm/rms_norm_impl.h"
#include "kernels/rms_norm/rms_norm_kernels.cuh"

namespace liger_cpp::kernels {
namespace {

// Forward for wide rows, torch.compile's design (ncu of its Triton kernel:
// 1024-thread blocks, 32 registers, two blocks per SM): one 1024-thread block
// per row and two blocks per SM, the row read twice. The first read, for the sum of squares, carries
// an L2 evict_last policy so the row stays in L2 over the streaming traffic;
// the second, for y, hits L2 and marks the lines evict_first (their last use).
// Two 16-byte vectors a thread are loaded before they are used. L1HINT: the
// loads also carry L1 evict_last / evict_first (as Triton's do), so that the
// second read can hit the SM's L1 (the plan's l1_hints: rows above 64 KiB).
template <typename T, typename WT, typename OT, int VEC, bool L1HINT = false>
__global__ void __launch_bounds__(1024, 2)
    rms_fwd_l2hint(const T* __restrict__ x, int64_t x_stride, const WT* __restrict__ w, OT* __restrict__ y,
                   float* __restrict__ rstd, int64_t cols, float eps, float offset, bool llama) {
  pdl_trigger();  // as rms_fwd_cached: a PDL-launched backward may fill this grid's tail
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int nvec = static_cast<int>(cols / VEC);
  const int tx = threadIdx.x, TX = blockDim.x;
  const T* xr = x + row * x_stride;
  const uint64_t keep = l2_evict_policy<true>();
  float ss0 = 0.f, ss1 = 0.f;
  for (int v = tx; v < nvec; v += 2 * TX) {
    Vec<T, VEC> a, b;
    constexpr int L1K = L1HINT ? kL1Last : kL1Default;
    load_16B_hint<L1K>(a, xr + static_cast<int64_t>(v) * VEC, keep);
    const bool two = v + TX < nvec;
    if (two) load_16B_hint<L1K>(b, xr + static_cast<int64_t>(v + TX) * VEC, keep);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float f = to_float<T>(a.v[j]);
      ss0 += f * f;
    }
    if (two) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float f = to_float<T>(b.v[j]);
        ss1 += f * f;
      }
    }
  }
  const float ss = group_sum</*FIRST_USE=*/true>(ss0 + ss1, scratch);
  const float r = 1.f / sqrtf(ss / static_cast<float>(cols) + eps);
  if (tx == 0) rstd[row] = r;
  const uint64_t drop = l2_evict_policy<false>();
  OT* yr = y + row * cols;
  for (int v = tx; v < nvec; v += 2 * TX) {
    Vec<T, VEC> xv[2];
    const bool two = v + TX < nvec;
    constexpr int L1D = L1HINT ? kL1First : kL1Default;
    load_16B_hint<L1D>(xv[0], xr + static_cast<int64_t>(v) * VEC, drop);
    if (two) load_16B_hint<L1D>(xv[1], xr + static_cast<int64_t>(v + TX) * VEC, drop);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (i == 1 && !two) break;
      const int64_t c = static_cast<int64_t>(v + i * TX) * VEC;
      float wf[VEC];
      load_weight<WT, VEC>(w, c, offset, wf);
      // Struct stores: packed 16-byte words measured slower here (docs/kernels/rms_norm.md).
      Vec<OT, VEC> out;
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        out.v[j] = from_float<OT>(normed<T>(to_float<T>(xv[i].v[j]), r, llama) * wf[j]);
      store_vec<OT, VEC>(yr + c, out);
    }
  }
}

}  // namespace

namespace rms_norm_impl {

cudaError_t launch_fwd_l2hint(const RmsNormFwdArgs& a, const RmsNormFwdPlan& p, cudaStream_t stream) {
  const bool llama = a.casting == RmsCasting::kLlama;
  return dispatch_types(a.x_dtype, a.w ? a.w_dtype : a.x_dtype, a.y_dtype, cudaErrorInvalidValue,
                        [&](auto xt, auto wt, auto yt) {
                          using T = decltype(xt);
                          using WT = decltype(wt);
                          using OT = decltype(yt);
                          constexpr int full = 16 / sizeof(T);
                          auto* kern = p.l1_hints ? &rms_fwd_l2hint<T, WT, OT, full, true>
                                                  : &rms_fwd_l2hint<T, WT, OT, full>;
                          kern<<<static_cast<unsigned>(p.grid), 1024, 0, stream>>>(
                              static_cast<const T*>(a.x), a.x_row_stride, static_cast<const WT*>(a.w),
                              static_cast<OT*>(a.y), a.rstd, a.cols, a.eps, a.offset, llama);
                          return cudaGetLastError();
                        });
}

}  // namespace rms_norm_impl
}  // namespace liger_cpp::kernels
