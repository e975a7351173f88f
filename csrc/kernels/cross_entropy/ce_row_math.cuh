// The row statistics and gradient of the cross-entropy row kernels (math:
// csrc/aten/checks/cross_entropy_core.h), shared by ce_two_pass.cuh,
// ce_cluster.cuh and ce_smem.cuh.
//
// Statistics per row, combined in a fixed order (deterministic):
//   m = max x, arg = first index of m, s = sum exp(x - m), wx = sum w_j x_j
//   (only needed with label smoothing), nan = any x is NaN.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/common/common.cuh"
#include "kernels/cross_entropy/cross_entropy.h"

namespace liger_cpp::kernels {
namespace {

struct Stats {
  float m;      // running max (-inf when empty)
  float s;      // sum of exp(x - m)
  int64_t arg;  // index of the first max (INT64_MAX when empty)
  float wx;     // sum of w_j * x_j
  int nan;      // any NaN seen
};

__device__ __forceinline__ Stats empty_stats() { return {-INFINITY, 0.f, INT64_MAX, 0.f, 0}; }

__device__ __forceinline__ float exp_or_zero(float m, float M) {
  // exp(m - M), with an empty side (m = -inf) contributing nothing even when M = -inf.
  return m == -INFINITY ? 0.f : expf(m - M);  // precise: it scales whole partial sums
}

__device__ __forceinline__ Stats combine(const Stats& a, const Stats& b) {
  Stats r;
  r.m = fmaxf(a.m, b.m);
  r.s = a.s * exp_or_zero(a.m, r.m) + b.s * exp_or_zero(b.m, r.m);
  r.arg = b.m > a.m ? b.arg : (a.m > b.m ? a.arg : min(a.arg, b.arg));
  r.wx = a.wx + b.wx;
  r.nan = a.nan | b.nan;
  return r;
}

__device__ __forceinline__ Stats shfl_xor(const Stats& a, int o) {
  Stats b;
  b.m = __shfl_xor_sync(0xffffffffu, a.m, o);
  b.s = __shfl_xor_sync(0xffffffffu, a.s, o);
  b.arg = __shfl_xor_sync(0xffffffffu, a.arg, o);
  b.wx = __shfl_xor_sync(0xffffffffu, a.wx, o);
  b.nan = __shfl_xor_sync(0xffffffffu, a.nan, o);
  return b;
}

__device__ __forceinline__ Stats warp_combine(Stats a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) a = combine(a, shfl_xor(a, o));
  return a;
}

// Combines the statistics of every thread of the block; the result is valid
// in every thread. scratch: 32 Stats in shared memory.
__device__ __forceinline__ Stats block_combine(Stats a, Stats* scratch) {
  a = warp_combine(a);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  if (nwarps == 1) return a;
  __syncthreads();
  if (lane == 0) scratch[warp] = a;
  __syncthreads();
  Stats b = lane < nwarps ? scratch[lane] : empty_stats();
  return warp_combine(b);
}

// Accumulates one element into per-thread statistics (max first, sums later).
struct RowOpts {
  float softcap, inv_softcap;  // softcap 0: none
  const float* weight;         // or null
  bool need_wx;                // label smoothing on
};

__device__ __forceinline__ float cap(float x, const RowOpts& o) {
  return o.softcap > 0.f ? o.softcap * tanhf(x * o.inv_softcap) : x;
}

// 2^x (MUFU; relative error ~2^-22).
__device__ __forceinline__ float ex2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

constexpr float kLog2e = 1.4426950408889634f;

// Constants of one row's gradient, from its combined statistics; the math and
// its grouping are cross_entropy_core.h's.
struct RowGrad {
  float m, s, log2s;  // capped row max, sum of exp(x - m), log2(s)
  float off2;         // m log2 e + log2 s, rounded once (the 2-byte fast path)
  float lse;
  float ca, cb, wsum, zc;  // cs (1 - ls) w_y, cs ls / V, sum(w), zs 2 lss lse
  float softcap, inv_softcap;
  const float* weight;
  int64_t y;
};

// p = exp(x - lse), evaluated as exp(x - m) / s: x - m is exact near the max,
// where p is large (exp(x - lse) with lse rounded to float32 costs several
// times PyTorch's float32 error). FAST (2-byte outputs): one FFMA and one MUFU,
// 2^(x log2 e - off2), the product exact inside the FFMA; off2's rounding
// (<= 2^-24 |off2|, a few 1e-6 relative in p) and MUFU's 2^-22 are ~1000 times
// below a bf16/fp16 output's rounding (2^-9 / 2^-12).
template <bool FAST>
__device__ __forceinline__ float prob(float x, const RowGrad& g) {
  if constexpr (FAST) return ex2(fmaf(x, kLog2e, -g.off2));
  return expf(x - g.m) / g.s;
}

// The gradient at one element (x after softcap, p its probability), grouped so
// that p_y - 1 is formed before any scaling (p_y near 1 cancels exactly) and
// each term vanishes where it should.
template <bool PLAIN>
__device__ __forceinline__ float grad_of(float x, float p, bool is_y, int64_t j, const RowGrad& g) {
  float d = g.ca * (is_y ? p - 1.f : p) + g.zc * p;
  if (!PLAIN) {
    if (g.cb != 0.f) d += g.cb * (g.wsum * p - (g.weight ? __ldg(g.weight + j) : 1.f));
    if (g.softcap > 0.f) {
      const float t = x * g.inv_softcap;
      d *= 1.f - t * t;
    }
  }
  return d;
}

// Loss terms and gradient constants of row r; writes loss / z_loss / argmax
// when `write` (one thread per row).
__device__ __forceinline__ RowGrad finish_row(const CeRowsArgs& a, int64_t r, int64_t y, const Stats& st,
                                              float x_y, bool write) {
  const float V = static_cast<float>(a.cols);
  const float ls = a.label_smoothing, eps = ls / V, lss = a.lse_square_scale;
  const float log_s = logf(st.s);
  const float lse = st.nan ? NAN : st.m + log_s;
  const float wy = a.weight ? __ldg(a.weight + y) : 1.f;
  const float wsum = a.weight ? *a.weight_sum : V;
  if (write) {
    float ce = (1.f - ls) * wy * (lse - x_y);
    if (ls != 0.f) ce += eps * (lse * wsum - st.wx);  // only with smoothing: 0 * inf would be NaN
    a.loss[r] = ce;
    if (a.z_loss) a.z_loss[r] = lss * lse * lse;
    if (a.argmax) a.argmax[r] = st.arg == INT64_MAX ? 0 : st.arg;
  }
  const float cs = a.ce_scale[r * a.ce_scale_stride], zs = a.z_scale[r * a.z_scale_stride];
  RowGrad g;
  g.m = st.nan ? NAN : st.m;
  g.s = st.s;
  g.log2s = log_s * kLog2e;
  g.off2 = fmaf(g.m, kLog2e, g.log2s);
  g.lse = lse;
  g.ca = cs * (1.f - ls) * wy;
  g.cb = cs * eps;
  g.wsum = wsum;
  g.zc = zs * 2.f * lss * lse;
  g.softcap = a.softcap;
  g.inv_softcap = a.softcap > 0.f ? 1.f / a.softcap : 0.f;
  g.weight = a.weight;
  g.y = y;
  return g;
}

// An ignored row (zeros) or a row with an out-of-range target (NaN): the
// calling threads cover [begin, end) of the row's gradient with `stride`.
template <typename T>
__device__ void skip_row(const CeRowsArgs& a, int64_t r, bool ignored, int64_t begin, int64_t end,
                         int64_t stride, bool write) {
  if (write) {
    a.loss[r] = ignored ? 0.f : NAN;
    if (a.z_loss) a.z_loss[r] = ignored ? 0.f : NAN;
    if (a.argmax) a.argmax[r] = -1;
  }
  if (!a.dlogits) return;
  T* d = static_cast<T*>(a.dlogits) + r * a.dlogits_row_stride;
  const T v = from_float<T>(ignored ? 0.f : NAN);
  for (int64_t j = begin; j < end; j += stride) d[j] = v;
}

}  // namespace
}  // namespace liger_cpp::kernels
