// RMSNorm forward for any width and alignment (rms_fwd_generic): the
// fallback for rows that are not whole 16-byte vectors, FusedAddRMSNorm's rows
// above 4096 vectors, and plain rows above 2^31 vectors (rms_fwd_l2hint's int
// indices). docs/kernels/rms_norm.md.
#include <algorithm>

#include "kernels/norm/norm_plan.h"
#include "kernels/rms_norm/rms_norm_impl.h"
#include "kernels/rms_norm/rms_norm_kernels.cuh"

namespace liger_cpp::kernels {
namespace {

// xv <- round_to_T(xv + rv), also stored at s (FusedAddRMSNorm's residual sum).
template <typename T, int VEC>
__device__ __forceinline__ void add_residual(Vec<T, VEC>& xv, const Vec<T, VEC>& rv, T* s) {
#pragma unroll
  for (int j = 0; j < VEC; ++j) xv.v[j] = from_float<T>(to_float<T>(xv.v[j]) + to_float<T>(rv.v[j]));
  store_vec<T, VEC>(s, xv);
}

// Forward for any width: one block per row. The row is stashed in shared
// memory on the first pass when it fits (STASH), else read again (from L2).
// ADD: as in rms_fwd_cached; without STASH the second pass reads s back.
template <typename T, typename WT, typename OT, int VEC, bool STASH, bool ADD>
__global__ void __launch_bounds__(1024)
    rms_fwd_generic(const T* __restrict__ x, int64_t x_stride, const T* __restrict__ res, int64_t res_stride,
                    T* s, const WT* __restrict__ w, OT* __restrict__ y, float* __restrict__ rstd,
                    int64_t cols, float eps, float offset, bool llama) {
  extern __shared__ __align__(16) unsigned char stash_raw[];
  Vec<T, VEC>* stash = reinterpret_cast<Vec<T, VEC>*>(stash_raw);
  __shared__ float scratch[kGroupScratch];
  const int64_t row = blockIdx.x;
  const int64_t nvec = cols / VEC;
  const T* xr = x + row * x_stride;
  float ss = 0.f;
#pragma unroll 4
  for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    Vec<T, VEC> xv = load_vec<T, VEC>(xr + v * VEC);
    if constexpr (ADD) {
      const Vec<T, VEC> rv = load_vec<T, VEC>(res + row * res_stride + v * VEC);
      add_residual<T, VEC>(xv, rv, s + row * cols + v * VEC);
    }
    if constexpr (STASH) stash[v] = xv;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float f = to_float<T>(xv.v[j]);
      ss += f * f;
    }
  }
  ss = group_sum</*FIRST_USE=*/true>(ss, scratch);  // its barrier also publishes the stash
  const float r = 1.f / sqrtf(ss / static_cast<float>(cols) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  OT* yr = y + row * cols;
#pragma unroll 4
  for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    Vec<T, VEC> xv;
    if constexpr (STASH) {
      xv = stash[v];
    } else if constexpr (ADD) {
      xv = load_vec<T, VEC>(s + row * cols + v * VEC);  // written by this thread above
    } else {
      xv = load_vec<T, VEC>(xr + v * VEC);
    }
    float wf[VEC];
    load_weight<WT, VEC>(w, v * VEC, offset, wf);
    Vec<OT, VEC> out;
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      out.v[j] = from_float<OT>(normed<T>(to_float<T>(xv.v[j]), r, llama) * wf[j]);
    store_vec<OT, VEC>(yr + v * VEC, out);
  }
}

}  // namespace

namespace rms_norm_impl {

// The largest grid.x: more rows than this are launched in pieces.
constexpr int64_t kMaxGridRows = 2147483647;

cudaError_t launch_fwd_generic(const RmsNormFwdArgs& a, const RmsNormFwdPlan& p, cudaStream_t stream) {
  const bool llama = a.casting == RmsCasting::kLlama;
  return dispatch_types(
      a.x_dtype, a.w ? a.w_dtype : a.x_dtype, a.y_dtype, cudaErrorInvalidValue,
      [&](auto xt, auto wt, auto yt) {
        using T = decltype(xt);
        using WT = decltype(wt);
        using OT = decltype(yt);
        constexpr int full = 16 / sizeof(T);
        const T* x = static_cast<const T*>(a.x);
        const WT* w = static_cast<const WT*>(a.w);
        OT* y = static_cast<OT*>(a.y);
        const T* res = static_cast<const T*>(a.res);
        T* sum = static_cast<T*>(a.s);
        // One block a row, launched in pieces of at most 2^31 - 1 rows (the
        // largest grid): the row offsets move into the pointers.
        auto launch = [&](auto add_c) -> cudaError_t {
          constexpr bool ADD = decltype(add_c)::value;
          for (int64_t r0 = 0; r0 < a.rows; r0 += kMaxGridRows) {
            const unsigned grid = static_cast<unsigned>(std::min(a.rows - r0, kMaxGridRows));
            const T* xp = x + r0 * a.x_row_stride;
            const T* rp = ADD ? res + r0 * a.res_row_stride : res;
            T* sp = ADD ? sum + r0 * a.cols : sum;
            OT* yp = y + r0 * a.cols;
            float* rs = a.rstd + r0;
            LIGER_DISPATCH_VEC(p.vec, full, {
              // Plain RMSNorm's aligned rows come here only above 2^31 vectors, far
              // above what the stash takes: that build does not exist.
              constexpr bool kCanStash = ADD || VEC == 1;
              if (p.stash) {
                if constexpr (kCanStash) {
                  auto* kern = &rms_fwd_generic<T, WT, OT, VEC, true, ADD>;
                  // A failed raise shows up as the launch's error.
                  raise_max_dynamic_smem(reinterpret_cast<const void*>(kern), p.smem);
                  kern<<<grid, 1024, p.smem, stream>>>(xp, a.x_row_stride, rp, a.res_row_stride, sp, w, yp,
                                                       rs, a.cols, a.eps, a.offset, llama);
                } else {
                  return cudaErrorInvalidValue;
                }
              } else {
                rms_fwd_generic<T, WT, OT, VEC, false, ADD><<<grid, 1024, 0, stream>>>(
                    xp, a.x_row_stride, rp, a.res_row_stride, sp, w, yp, rs, a.cols, a.eps, a.offset, llama);
              }
            })
            const cudaError_t err = cudaGetLastError();
            if (err != cudaSuccess) return err;
          }
          return cudaSuccess;
        };
        return a.res != nullptr ? launch(std::true_type{}) : launch(std::false_type{});
      });
}

}  // namespace rms_norm_impl
}  // namespace liger_cpp::kernels
