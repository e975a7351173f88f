// Row kernels of the RL and distillation losses (math: divergence.h). One block per row (rows
// striding over the grid), 16-byte vector accesses where the rows allow, float32 math. The
// statistics a row's gradient needs (softmax normalisers, sums over the row) are reduced over the
// block first and the row is read again: these kernels read a row two or three times (the re-reads
// mostly from L2) and write it once.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/common/common.cuh"
#include "kernels/common/plan_override.h"
#include "kernels/divergence/divergence.h"

namespace liger_cpp::kernels {
namespace {

constexpr int kMaxThreads = 1024;  // threads_for()'s largest block (and at most 64 registers a thread)

// Sum / max over the block (blockDim.x a multiple of 32); every thread gets the result and must
// call. scratch: 32 floats in shared memory.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();  // a previous call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_sum(lane < nw ? scratch[lane] : 0.f);
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  v = warp_max(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_max(lane < nw ? scratch[lane] : -INFINITY);
}

// Online max and sum of exp(x - max) of one thread's elements.
struct Online {
  float m = -INFINITY, s = 0.f;
  __device__ __forceinline__ void add(float x) {
    if (x == -INFINITY) return;  // contributes nothing (and -inf - -inf would be NaN)
    if (x > m) {
      s = s * (m == -INFINITY ? 0.f : expf(m - x)) + 1.f;
      m = x;
    } else {
      s += expf(x - m);  // NaN x propagates here
    }
  }
};

// The block's (max, log sum exp(x - max)) from every thread's Online.
__device__ __forceinline__ float2 block_lse(const Online& o, float* scratch) {
  const float M = block_max(o.m, scratch);
  const float s = block_sum(o.m == -INFINITY ? 0.f : o.s * expf(o.m - M), scratch);
  return make_float2(M, logf(s));
}

// exp and log of the distillation kernel's element passes. FAST (2-byte logits, whose gradient is
// rounded to 2^-8 / 2^-11): the MUFU's ex2 / lg2 (relative error ~2^-22, and the product with log2 e
// rounded once) instead of the precise expf / logf; the row statistics (pass 1) stay precise.
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

template <bool FAST>
__device__ __forceinline__ float exp_(float x) {
  if constexpr (FAST) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x * kLog2e));
    return r;
  }
  return expf(x);
}

template <bool FAST>
__device__ __forceinline__ float log_(float x) {
  if constexpr (FAST) {
    float r;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r * kLn2;
  }
  return logf(x);
}

// log M of the mixture M = beta P + (1 - beta) S from the two probabilities (one log, no
// logaddexp): -inf where both underflow, and those terms are 0 (pdiff).
template <bool FAST>
__device__ __forceinline__ float log_mix(float P, float S, float beta) {
  const float M = beta * P + (1.f - beta) * S;
  return M > 0.f ? log_<FAST>(M) : -INFINITY;
}

__device__ __forceinline__ float logaddexp(float a, float b) {
  const float m = fmaxf(a, b);
  if (m == -INFINITY) return -INFINITY;
  return m + log1pf(expf(-fabsf(a - b)));
}

// p * (a - b), 0 where p is 0 (a masked class: its -inf log-probability times 0).
__device__ __forceinline__ float pdiff(float p, float a, float b) { return p > 0.f ? p * (a - b) : 0.f; }

template <typename T, int VE>
__device__ __forceinline__ void zero_row(T* d, int64_t cols) {
  for (int64_t j = static_cast<int64_t>(threadIdx.x) * VE; j < cols;
       j += static_cast<int64_t>(blockDim.x) * VE) {
    Vec<T, VE> z;
#pragma unroll
    for (int e = 0; e < VE; ++e) z.v[e] = from_float<T>(0.f);
    store_vec<T, VE>(d + j, z);
  }
}

// ---------------------------------------------------------------------------------------- distill

template <typename T, int VE>
__global__ void __launch_bounds__(kMaxThreads) distill_kernel(DistillRowsArgs a) {
  constexpr bool FAST = sizeof(T) == 2;
  __shared__ float scratch[32];
  const int64_t V = a.cols, Vs = a.student_cols;
  const float invT = a.inv_temperature, beta = a.beta;
  const bool cosine = a.loss == 1;
  const int64_t step = static_cast<int64_t>(blockDim.x) * VE,
                j_first = static_cast<int64_t>(threadIdx.x) * VE;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    T* s = static_cast<T*>(a.s) + r * a.s_row_stride;
    const T* t = static_cast<const T*>(a.t) + r * a.t_row_stride;
    const int64_t y = a.target ? a.target[r] : -1;
    const bool valid = a.target == nullptr || y != a.ignore_index;
    if (!valid && a.mask_soft) {
      if (threadIdx.x == 0) a.soft[r] = a.hard[r] = 0.f;
      if (a.scales) zero_row<T, VE>(s, V);
      continue;
    }
    const bool hard = valid && a.target != nullptr;
    // The hard loss's own lse (at temperature 1, over the student's classes) unless it is the soft one's.
    const bool sep_hard = hard && (cosine || invT != 1.f || Vs != V);
    // Read before any thread writes the gradient over s.
    const float s_y = hard ? to_float<T>(s[y]) : 0.f;
    Online os, ot, oh;
    float suu = 0.f, svv = 0.f, suv = 0.f;
    for (int64_t j0 = j_first; j0 < V; j0 += step) {
      const Vec<T, VE> sv = load_vec<T, VE>(s + j0), tv = load_vec<T, VE>(t + j0);
#pragma unroll
      for (int e = 0; e < VE; ++e) {
        const float sx = to_float<T>(sv.v[e]), zs = sx * invT, zt = to_float<T>(tv.v[e]) * invT;
        if (cosine) {
          suu += zs * zs;
          svv += zt * zt;
          suv += zs * zt;
        } else {
          os.add(zs);
          ot.add(zt);
        }
        if (sep_hard && j0 + e < Vs) oh.add(sx);
      }
    }
    float2 ls = make_float2(0.f, 0.f), lt = ls, lh = ls;
    float nu = 1.f, nv = 1.f, c = 0.f;
    if (cosine) {
      nu = fmaxf(sqrtf(block_sum(suu, scratch)), 1e-12f);
      nv = fmaxf(sqrtf(block_sum(svv, scratch)), 1e-12f);
      c = block_sum(suv, scratch) / (nu * nv);
    } else {
      ls = block_lse(os, scratch);
      lt = block_lse(ot, scratch);
    }
    if (sep_hard) lh = block_lse(oh, scratch);
    if (hard && !sep_hard) lh = ls;
    // JSD's row sums: the loss, and K = sum S (log S - log M) for the gradient.
    float soft = 0.f, K = 0.f;
    const bool grad = a.scales != nullptr;
    if (cosine) {
      soft = beta * (1.f - c);
    } else if (!(beta == 0.f && grad)) {  // beta 0 with a gradient: the loss is summed in that pass
      float acc = 0.f, acck = 0.f;
      for (int64_t j0 = j_first; j0 < V; j0 += step) {
        const Vec<T, VE> sv = load_vec<T, VE>(s + j0), tv = load_vec<T, VE>(t + j0);
#pragma unroll
        for (int e = 0; e < VE; ++e) {
          const float lS = (to_float<T>(sv.v[e]) * invT - ls.x) - ls.y;
          const float lP = (to_float<T>(tv.v[e]) * invT - lt.x) - lt.y;
          const float S = exp_<FAST>(lS), P = exp_<FAST>(lP);
          if (beta == 0.f) {
            acc += pdiff(P, lP, lS);
          } else if (beta == 1.f) {
            acc += pdiff(S, lS, lP);
          } else {
            const float lM = log_mix<FAST>(P, S, beta);
            const float ks = pdiff(S, lS, lM);
            acc += beta * pdiff(P, lP, lM) + (1.f - beta) * ks;
            acck += ks;
          }
        }
      }
      soft = block_sum(acc, scratch);
      K = beta == 1.f ? soft : (beta == 0.f ? 0.f : block_sum(acck, scratch));
    }
    const float hard_loss = hard ? (lh.x + lh.y) - s_y : 0.f;
    if (!grad) {
      if (threadIdx.x == 0) {
        a.soft[r] = soft;
        a.hard[r] = hard_loss;
      }
      continue;
    }
    const float cs = a.scales[0] * invT, ch = hard ? a.scales[1] : 0.f;
    float acc0 = 0.f;
    for (int64_t j0 = j_first; j0 < V; j0 += step) {
      const Vec<T, VE> sv = load_vec<T, VE>(s + j0), tv = load_vec<T, VE>(t + j0);
      Vec<T, VE> out;
#pragma unroll
      for (int e = 0; e < VE; ++e) {
        const int64_t j = j0 + e;
        const float sx = to_float<T>(sv.v[e]), zs = sx * invT, zt = to_float<T>(tv.v[e]) * invT;
        float d = 0.f;
        if (cosine) {
          d = cs * (-beta) * (zt / (nu * nv) - c * zs / (nu * nu));
        } else {
          const float lS = (zs - ls.x) - ls.y, lP = (zt - lt.x) - lt.y;
          const float S = exp_<FAST>(lS), P = exp_<FAST>(lP);
          if (beta == 0.f) {
            acc0 += pdiff(P, lP, lS);
            d = cs * (S - P);
          } else if (beta == 1.f) {
            d = cs * (S > 0.f ? S * ((lS - lP) - K) : 0.f);
          } else {
            const float lM = log_mix<FAST>(P, S, beta);
            d = cs * (1.f - beta) * (S > 0.f ? S * ((lS - lM) - K) : 0.f);
          }
        }
        if (ch != 0.f && j < Vs) {
          const float p = exp_<FAST>((sx - lh.x) - lh.y);
          d += ch * (j == y ? p - 1.f : p);  // p_y - 1 formed before the scaling
        }
        out.v[e] = from_float<T>(j < Vs ? d : 0.f);
      }
      store_vec<T, VE>(s + j0, out);
    }
    if (!cosine && beta == 0.f) soft = block_sum(acc0, scratch);
    if (threadIdx.x == 0) {
      a.soft[r] = soft;
      a.hard[r] = hard_loss;
    }
  }
}

// ---------------------------------------------------------------------------------------- logprob

// Online (max, sum exp(z - max), sum exp(z - max) (z - max)) of one thread's elements.
struct OnlineH {
  float m = -INFINITY, s = 0.f, u = 0.f;
  __device__ __forceinline__ void add(float x) {
    if (x == -INFINITY) return;
    if (x > m) {
      const float f = m == -INFINITY ? 0.f : expf(m - x);
      u = m == -INFINITY ? 0.f : f * (u + (m - x) * s);
      s = s * f + 1.f;
      m = x;
    } else {
      const float e = expf(x - m);
      s += e;
      u += e * (x - m);
    }
  }
};

template <typename T, int VE>
__global__ void __launch_bounds__(kMaxThreads) logprob_fwd_kernel(LogprobRowsArgs a) {
  __shared__ float scratch[32];
  const int64_t V = a.cols;
  const int64_t step = static_cast<int64_t>(blockDim.x) * VE,
                j_first = static_cast<int64_t>(threadIdx.x) * VE;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T* z = static_cast<const T*>(a.z) + r * a.row_stride;
    const int64_t y = a.target[r];
    if (y == a.ignore_index) {
      if (threadIdx.x == 0) {
        a.logp[r] = 0.f;
        if (a.entropy) a.entropy[r] = 0.f;
        if (a.stats) a.stats[2 * r] = a.stats[2 * r + 1] = 0.f;
      }
      continue;
    }
    OnlineH o;
    for (int64_t j0 = j_first; j0 < V; j0 += step) {
      const Vec<T, VE> v = load_vec<T, VE>(z + j0);
#pragma unroll
      for (int e = 0; e < VE; ++e) o.add(to_float<T>(v.v[e]));
    }
    const float M = block_max(o.m, scratch);
    const float f = o.m == -INFINITY ? 0.f : expf(o.m - M);
    const float s = block_sum(o.s * f, scratch);
    const float u = block_sum(o.m == -INFINITY ? 0.f : f * (o.u + (o.m - M) * o.s), scratch);
    if (threadIdx.x == 0) {
      const float log_s = logf(s);
      a.logp[r] = (to_float<T>(z[y]) - M) - log_s;
      if (a.entropy) a.entropy[r] = log_s - u / s;
      if (a.stats) {
        a.stats[2 * r] = M;
        a.stats[2 * r + 1] = log_s;
      }
    }
  }
}

template <typename T, int VE>
__global__ void __launch_bounds__(kMaxThreads) logprob_bwd_kernel(LogprobRowsArgs a) {
  const int64_t V = a.cols;
  const int64_t step = static_cast<int64_t>(blockDim.x) * VE,
                j_first = static_cast<int64_t>(threadIdx.x) * VE;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    T* z = static_cast<T*>(a.z) + r * a.row_stride;
    const int64_t y = a.target[r];
    if (y == a.ignore_index) {
      zero_row<T, VE>(z, V);
      continue;
    }
    const float M = a.stats[2 * r], log_s = a.stats[2 * r + 1];
    const float glp = a.g_lp ? a.g_lp[r] * a.scale : 0.f;
    const float gent = a.g_ent ? a.g_ent[r] * a.scale : 0.f;
    const float mu = M + (log_s - (a.entropy ? a.entropy[r] : 0.f));  // sum p z = lse - entropy
    for (int64_t j0 = j_first; j0 < V; j0 += step) {
      const Vec<T, VE> v = load_vec<T, VE>(z + j0);
      Vec<T, VE> out;
#pragma unroll
      for (int e = 0; e < VE; ++e) {
        const float x = to_float<T>(v.v[e]);
        const float p = expf((x - M) - log_s);
        float d = -glp * (j0 + e == y ? p - 1.f : p);
        if (gent != 0.f) d -= gent * p * (x - mu);
        out.v[e] = from_float<T>(d);
      }
      store_vec<T, VE>(z + j0, out);
    }
  }
}

// ------------------------------------------------------------------------------------- pointwise

template <typename T, int VE>
__global__ void __launch_bounds__(kMaxThreads) pointwise_kernel(PointwiseDivArgs a) {
  __shared__ float scratch[32];
  const int64_t V = a.cols;
  const float beta = a.beta, eps = a.eps;
  const float scale = a.grad ? a.grad_scale[0] : 0.f;
  const int64_t step = static_cast<int64_t>(blockDim.x) * VE,
                j_first = static_cast<int64_t>(threadIdx.x) * VE;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T* x = static_cast<const T*>(a.x) + r * a.x_row_stride;
    const T* yv = static_cast<const T*>(a.y) + r * a.y_row_stride;
    T* g = a.grad ? static_cast<T*>(a.grad) + r * a.grad_row_stride : nullptr;
    float* le = a.loss_elems ? a.loss_elems + r * V : nullptr;
    const bool ignored = a.labels != nullptr && a.labels[r] == a.ignore_index;
    float acc = 0.f;
    for (int64_t j0 = j_first; j0 < V; j0 += step) {
      const Vec<T, VE> xv = load_vec<T, VE>(x + j0), tv = load_vec<T, VE>(yv + j0);
      Vec<T, VE> gv;
#pragma unroll
      for (int e = 0; e < VE; ++e) {
        const float xi = to_float<T>(xv.v[e]), yi = to_float<T>(tv.v[e]);
        float l = 0.f, d = 0.f;
        if (!ignored) {
          if (a.kind == 0) {
            const float P = expf(yi), Q = expf(xi);
            if (beta == 0.f) {
              l = pdiff(P, yi, xi);
              d = -P;
            } else if (beta == 1.f) {
              l = pdiff(Q, xi, yi);
              d = l + Q;
            } else {
              const float lM = logaddexp(logf(beta) + yi, log1pf(-beta) + xi);
              // beta P y + (1 - beta) Q x - M log M = beta P (y - log M) + (1 - beta) Q (x - log M)
              const float lq = pdiff(Q, xi, lM);
              l = beta * pdiff(P, yi, lM) + (1.f - beta) * lq;
              d = (1.f - beta) * lq;
            }
          } else if (a.kind == 1) {
            if (a.log_target) {
              const float P = expf(yi);
              l = P * (yi - xi);
              d = -P;
            } else {
              l = yi * (logf(fmaxf(yi, eps)) - xi);
              d = -yi;
            }
          } else {
            l = 0.5f * fabsf(xi - yi);
            d = xi > yi ? 0.5f : (xi < yi ? -0.5f : 0.f);
          }
        }
        if (le) le[j0 + e] = l;
        acc += l;
        gv.v[e] = from_float<T>(d * scale);
      }
      if (g) store_vec<T, VE>(g + j0, gv);
    }
    if (a.loss_rows) {
      const float total = block_sum(acc, scratch);
      if (threadIdx.x == 0) a.loss_rows[r] = total;
    }
  }
}

// --------------------------------------------------------------------------------------- launch

int threads_for(int64_t cols, int ve) {
  const int64_t vecs = ceil_div(cols, ve);
  if (vecs >= 4096) return kMaxThreads;
  if (vecs >= 1024) return 512;
  if (vecs >= 256) return 256;
  return 128;
}

unsigned grid_for(int64_t rows) {
  return static_cast<unsigned>(rows < (int64_t{1} << 30) ? rows : (int64_t{1} << 30));
}

template <typename T>
bool rows_aligned(const void* p, int64_t row_stride, int64_t cols) {
  constexpr int VE = 16 / sizeof(T);
  return p == nullptr ||
         (is_aligned(p, 16) && (row_stride * static_cast<int64_t>(sizeof(T))) % 16 == 0 && cols % VE == 0);
}

}  // namespace

cudaError_t distill_rows(const DistillRowsArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int VE = 16 / sizeof(T);
    const bool vec =
        rows_aligned<T>(a.s, a.s_row_stride, a.cols) && rows_aligned<T>(a.t, a.t_row_stride, a.cols);
    // A block per row (a persistent grid sized to keep the rows in L2 lost: docs/kernels/rl_losses.md).
    const unsigned grid = grid_for(a.rows);
    if (vec)
      distill_kernel<T, VE><<<grid, threads_for(a.cols, VE), 0, stream>>>(a);
    else
      distill_kernel<T, 1><<<grid, threads_for(a.cols, 1), 0, stream>>>(a);
    return cudaGetLastError();
  });
}

cudaError_t logprob_rows_fwd(const LogprobRowsArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int VE = 16 / sizeof(T);
    if (rows_aligned<T>(a.z, a.row_stride, a.cols))
      logprob_fwd_kernel<T, VE><<<grid_for(a.rows), threads_for(a.cols, VE), 0, stream>>>(a);
    else
      logprob_fwd_kernel<T, 1><<<grid_for(a.rows), threads_for(a.cols, 1), 0, stream>>>(a);
    return cudaGetLastError();
  });
}

cudaError_t logprob_rows_bwd(const LogprobRowsArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int VE = 16 / sizeof(T);
    if (rows_aligned<T>(a.z, a.row_stride, a.cols))
      logprob_bwd_kernel<T, VE><<<grid_for(a.rows), threads_for(a.cols, VE), 0, stream>>>(a);
    else
      logprob_bwd_kernel<T, 1><<<grid_for(a.rows), threads_for(a.cols, 1), 0, stream>>>(a);
    return cudaGetLastError();
  });
}

cudaError_t pointwise_div_rows(const PointwiseDivArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int VE = 16 / sizeof(T);
    const bool vec = rows_aligned<T>(a.x, a.x_row_stride, a.cols) &&
                     rows_aligned<T>(a.y, a.y_row_stride, a.cols) &&
                     rows_aligned<T>(a.grad, a.grad_row_stride, a.cols);
    if (vec)
      pointwise_kernel<T, VE><<<grid_for(a.rows), threads_for(a.cols, VE), 0, stream>>>(a);
    else
      pointwise_kernel<T, 1><<<grid_for(a.rows), threads_for(a.cols, 1), 0, stream>>>(a);
    return cudaGetLastError();
  });
}

}  // namespace liger_cpp::kernels
