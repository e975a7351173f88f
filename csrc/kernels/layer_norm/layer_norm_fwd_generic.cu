// LayerNorm forward for any width and alignment (ln_fwd_generic): rows that
// are not whole 16-byte vectors, and rows above 4096 vectors.
// docs/kernels/layer_norm.md.
#include <algorithm>

#include "kernels/layer_norm/layer_norm_impl.h"
#include "kernels/layer_norm/layer_norm_kernels.cuh"
#include "kernels/norm/norm_plan.h"

namespace liger_cpp::kernels {
namespace {

// Forward for any width: one block per row; the row is stashed in shared
// memory when it fits (STASH), else read again (from L2) for each pass.
template <typename T, typename WT, int VEC, bool STASH>
__global__ void __launch_bounds__(1024)
    ln_fwd_generic(const T* __restrict__ x, int64_t x_stride, const WT* __restrict__ w,
                   const WT* __restrict__ b, T* __restrict__ y, float* __restrict__ mean,
                   float* __restrict__ rstd, int64_t cols, float eps) {
  extern __shared__ __align__(16) unsigned char stash_raw[];
  Vec<T, VEC>* stash = reinterpret_cast<Vec<T, VEC>*>(stash_raw);
  __shared__ float scratch[kGroupScratch];
  __shared__ float scratch2[kGroupScratch];  // the variance's sum: see group_sum's FIRST_USE
  const int64_t row = blockIdx.x;
  const int64_t nvec = cols / VEC;
  const T* xr = x + row * x_stride;
  auto load = [&](int64_t v) {
    if constexpr (STASH) {
      return stash[v];
    } else {
      return load_vec<T, VEC>(xr + v * VEC);
    }
  };
  float s = 0.f;
  for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    const Vec<T, VEC> xv = load_vec<T, VEC>(xr + v * VEC);
    if constexpr (STASH) stash[v] = xv;
#pragma unroll
    for (int j = 0; j < VEC; ++j) s += to_float<T>(xv.v[j]);
  }
  // The barrier publishes the stash.
  const float m = group_sum</*FIRST_USE=*/true>(s, scratch) / static_cast<float>(cols);
  float ss = 0.f;
  for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    const Vec<T, VEC> xv = load(v);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float d = to_float<T>(xv.v[j]) - m;
      ss += d * d;
    }
  }
  ss = group_sum</*FIRST_USE=*/true>(ss, scratch2);
  const float r = 1.f / sqrtf(ss / static_cast<float>(cols) + eps);
  if (threadIdx.x == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
  T* yr = y + row * cols;
  for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    const Vec<T, VEC> xv = load(v);
    float wf[VEC], bf[VEC];
    load_param<WT, VEC>(w, v * VEC, 1.f, wf);
    load_param<WT, VEC>(b, v * VEC, 0.f, bf);
    Vec<T, VEC> out;
#pragma unroll
    for (int j = 0; j < VEC; ++j) out.v[j] = from_float<T>((to_float<T>(xv.v[j]) - m) * r * wf[j] + bf[j]);
    store_vec<T, VEC>(yr + v * VEC, out);
  }
}

}  // namespace

namespace layer_norm_impl {

// The largest grid.x: more rows than this are launched in pieces.
constexpr int64_t kMaxGridRows = 2147483647;

cudaError_t launch_fwd_generic(const LayerNormFwdArgs& a, const LayerNormFwdPlan& p, cudaStream_t stream) {
  const bool has_param = a.w != nullptr || a.b != nullptr;
  return dispatch_ln_types(
      a.x_dtype, has_param ? a.w_dtype : a.x_dtype, cudaErrorInvalidValue, [&](auto xt, auto wt) {
        using T = decltype(xt);
        using WT = decltype(wt);
        constexpr int full = 16 / sizeof(T);
        const T* x = static_cast<const T*>(a.x);
        const WT* w = static_cast<const WT*>(a.w);
        const WT* b = static_cast<const WT*>(a.b);
        T* y = static_cast<T*>(a.y);
        // One block a row, launched in pieces of at most 2^31 - 1 rows (the largest grid): the row
        // offsets move into the pointers.
        for (int64_t r0 = 0; r0 < a.rows; r0 += kMaxGridRows) {
          const unsigned grid = static_cast<unsigned>(std::min(a.rows - r0, kMaxGridRows));
          const T* xp = x + r0 * a.x_row_stride;
          T* yp = y + r0 * a.cols;
          float* mp = a.mean + r0;
          float* rp = a.rstd + r0;
          LIGER_DISPATCH_VEC(p.vec, full, {
            if (p.stash) {
              auto* kern = &ln_fwd_generic<T, WT, VEC, true>;
              // A failed raise shows up as the launch's error.
              raise_max_dynamic_smem(reinterpret_cast<const void*>(kern), p.smem);
              kern<<<grid, 1024, p.smem, stream>>>(xp, a.x_row_stride, w, b, yp, mp, rp, a.cols, a.eps);
            } else {
              ln_fwd_generic<T, WT, VEC, false>
                  <<<grid, 1024, 0, stream>>>(xp, a.x_row_stride, w, b, yp, mp, rp, a.cols, a.eps);
            }
          })
          const cudaError_t err = cudaGetLastError();
          if (err != cudaSuccess) return err;
        }
        return cudaSuccess;
      });
}

}  // namespace layer_norm_impl
}  // namespace liger_cpp::kernels
