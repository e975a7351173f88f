// Cross entropy and total variation distance of a student row against a teacher row, unreduced
// (math: divergence.h, CeTvdArgs). One block per row pair (rows striding over the grid), 16-byte
// vectors where the rows allow, float32 math. The forward reads the pair twice (the softmax
// statistics, then |p - q| and the sigma sum), the backward once more and writes the gradient.
#include <cmath>
#include <cstdint>

#include "kernels/common/common.cuh"
#include "kernels/divergence/divergence.h"
#include "kernels/divergence/row_common.cuh"

namespace liger_cpp::kernels {
namespace {

// sign(p - q), 0 at a tie (the subgradient torch.abs's backward takes).
__device__ __forceinline__ float sign_of(float d) { return d > 0.f ? 1.f : (d < 0.f ? -1.f : 0.f); }

template <typename T, int VE>
__device__ __forceinline__ void to_floats(const Vec<T, VE>& v, float (&f)[VE]) {
#pragma unroll
  for (int e = 0; e < VE; ++e) f[e] = to_float<T>(v.v[e]);
}

// p = exp(x - lse): the precise expf for float32 rows, the MUFU's 2^x for 2-byte ones (2^-22
// relative, far below their own rounding). Student and teacher go through the same expression, so
// identical rows give identical p and q (a tie, sign 0).
template <bool FAST>
__device__ __forceinline__ float prob(float x, float lse) {
  return FAST ? ex2((x - lse) * kLog2e) : expf(x - lse);
}

template <typename T, int VE>
__global__ void __launch_bounds__(kMaxThreads) ce_tvd_fwd_kernel(CeTvdArgs a) {
  constexpr bool FAST = sizeof(T) == 2;
  __shared__ float scratch[32];
  const int64_t V = a.cols, step = static_cast<int64_t>(blockDim.x) * VE,
                j_first = static_cast<int64_t>(threadIdx.x) * VE;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T* s = static_cast<const T*>(a.s) + r * a.s_row_stride;
    const T* t = static_cast<const T*>(a.t) + r * a.t_row_stride;
    const int64_t y = a.target[r];
    if (y == a.ignore_index) {
      if (threadIdx.x == 0) {
        a.ce[r] = a.tvd[r] = 0.f;
        a.stats[3 * r] = a.stats[3 * r + 1] = a.stats[3 * r + 2] = 0.f;
      }
      continue;
    }
    // Pass 1: both rows' max and sum of exponentials.
    OnlineRow<FAST, false> os, ot;
    for (int64_t j0 = j_first; j0 < V; j0 += step) {
      float xs[VE], xt[VE];
      to_floats<T, VE>(load_vec<T, VE>(s + j0), xs);
      to_floats<T, VE>(load_vec<T, VE>(t + j0), xt);
      os.add(xs, 1.f, kLog2e);
      ot.add(xt, 1.f, kLog2e);
    }
    float lse[2];
    {
      const OnlineRow<FAST, false>* o[2] = {&os, &ot};
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const float M = block_max(o[k]->m, scratch);
        const float f = o[k]->m == -INFINITY ? 0.f : expf(o[k]->m - M);
        lse[k] = M + logf(block_sum(o[k]->s * f, scratch));
      }
    }
    // Pass 2: sum |p - q| and sigma = sum p sign(p - q), walking the row backwards: what pass 1
    // read last is the likeliest to be in L2 still (the block's share of L2 is about half its pair
    // of rows at V 151936), so more of the second read comes from L2 than from memory.
    float abs_sum = 0.f, sigma = 0.f;
    const int64_t j_last = j_first < V ? j_first + (V - 1 - j_first) / step * step : -1;
    for (int64_t j0 = j_last; j0 >= 0; j0 -= step) {
      float xs[VE], xt[VE];
      to_floats<T, VE>(load_vec<T, VE>(s + j0), xs);
      to_floats<T, VE>(load_vec<T, VE>(t + j0), xt);
#pragma unroll
      for (int e = 0; e < VE; ++e) {
        const float p = prob<FAST>(xs[e], lse[0]), q = prob<FAST>(xt[e], lse[1]);
        abs_sum += fabsf(p - q);
        sigma += p * sign_of(p - q);
      }
    }
    abs_sum = block_sum(abs_sum, scratch);
    sigma = block_sum(sigma, scratch);
    if (threadIdx.x == 0) {
      a.ce[r] = lse[0] - to_float<T>(s[y]);
      a.tvd[r] = 0.5f * abs_sum;
      a.stats[3 * r] = lse[0];
      a.stats[3 * r + 1] = lse[1];
      a.stats[3 * r + 2] = sigma;
    }
  }
}

template <typename T, int VE>
__global__ void __launch_bounds__(kMaxThreads) ce_tvd_bwd_kernel(CeTvdArgs a) {
  constexpr bool FAST = sizeof(T) == 2;
  const int64_t V = a.cols, step = static_cast<int64_t>(blockDim.x) * VE,
                j_first = static_cast<int64_t>(threadIdx.x) * VE;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T* s = static_cast<const T*>(a.s) + r * a.s_row_stride;
    const T* t = static_cast<const T*>(a.t) + r * a.t_row_stride;
    T* g = static_cast<T*>(a.grad) + r * a.grad_row_stride;
    const int64_t y = a.target[r];
    if (y == a.ignore_index) {
      zero_row<T, VE>(g, V);
      continue;
    }
    const float gce = a.grad_ce ? a.grad_ce[r] : 0.f, gtvd = a.grad_tvd ? 0.5f * a.grad_tvd[r] : 0.f;
    const float lse_s = a.stats[3 * r], lse_t = a.stats[3 * r + 1], sigma = a.stats[3 * r + 2];
    for (int64_t j0 = j_first; j0 < V; j0 += step) {
      float xs[VE], xt[VE], d[VE];
      to_floats<T, VE>(load_vec<T, VE>(s + j0), xs);
      to_floats<T, VE>(load_vec<T, VE>(t + j0), xt);
#pragma unroll
      for (int e = 0; e < VE; ++e) {
        const float p = prob<FAST>(xs[e], lse_s), q = prob<FAST>(xt[e], lse_t);
        d[e] = gce * (j0 + e == y ? p - 1.f : p) + gtvd * p * (sign_of(p - q) - sigma);
      }
      if constexpr (sizeof(Vec<T, VE>) == 16)
        store_16B_words(g + j0, pack_vec<T, VE>(d));
      else
#pragma unroll
        for (int e = 0; e < VE; ++e) g[j0 + e] = from_float<T>(d[e]);
    }
  }
}

}  // namespace

cudaError_t ce_tvd_fwd(const CeTvdArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int VE = 16 / sizeof(T);
    if (rows_aligned<T>(a.s, a.s_row_stride, a.cols) && rows_aligned<T>(a.t, a.t_row_stride, a.cols))
      ce_tvd_fwd_kernel<T, VE><<<grid_for(a.rows), threads_for(a.cols, VE), 0, stream>>>(a);
    else
      ce_tvd_fwd_kernel<T, 1><<<grid_for(a.rows), threads_for(a.cols, 1), 0, stream>>>(a);
    return cudaGetLastError();
  });
}

cudaError_t ce_tvd_bwd(const CeTvdArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int VE = 16 / sizeof(T);
    if (rows_aligned<T>(a.s, a.s_row_stride, a.cols) && rows_aligned<T>(a.t, a.t_row_stride, a.cols) &&
        rows_aligned<T>(a.grad, a.grad_row_stride, a.cols))
      ce_tvd_bwd_kernel<T, VE><<<grid_for(a.rows), threads_for(a.cols, VE), 0, stream>>>(a);
    else
      ce_tvd_bwd_kernel<T, 1><<<grid_for(a.rows), threads_for(a.cols, 1), 0, stream>>>(a);
    return cudaGetLastError();
  });
}

}  // namespace liger_cpp::kernels
