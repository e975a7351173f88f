// Helpers of the one-block-per-row kernels of the RL and distillation losses (divergence.cu,
// ce_tvd.cu): block reductions, the online softmax statistics of a row, zeroing a row, and the launch
// shape (threads by row width, a grid of rows, whether rows allow 16-byte vectors).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/common/common.cuh"
// ex2, kLog2e, shared with the cross entropy's cluster kernels.
#include "kernels/cross_entropy/ce_cluster_common.cuh"

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

// One thread's running statistics of a row read as z = c x (c = z_scale > 0), kept in the stored
// row's units: m = the largest x seen, s = sum exp(c (x - m)), u = sum exp(c (x - m)) c (x - m)
// (the entropy's numerator, ENT only). A vector of VE elements at a time: its max first, so the
// running sums are rescaled once a vector at most and each element costs one exponential. 2-byte
// rows (FAST) take 2^((x - m) k) with k = c log2 e, one MUFU (2^-22, far below the input's own
// rounding); float32 rows take expf. The scale folds into k, so a temperature costs nothing. x - m
// is formed first (exact for 2-byte inputs), so the max itself contributes exactly 1: the CE
// statistics pass's 2^(x k - m k), one FFMA, left the rounding of m k in every p (a row with one
// finite logit gave a log-prob of +1.2e-7 to +2.4e-7, not 0).
// (The previous loop updated max, sum and entropy per element with a branch and an accurate expf:
// 1.425 ms at 8 x 1024 x 151936 bf16 on the H100, 1.7 x Liger's Triton kernel; its scale multiply
// another 2.8 %.)
template <bool FAST, bool ENT>
struct OnlineRow {
  float m = -INFINITY, s = 0.f, u = 0.f;
  template <int VE>
  __device__ __forceinline__ void add(const float (&x)[VE], float c, float k) {
    float vm = x[0];
#pragma unroll
    for (int e = 1; e < VE; ++e) vm = fmaxf(vm, x[e]);
    if (vm > m) {  // false for a NaN-only or -inf-only vector
      if (m != -INFINITY) {
        const float dm = (m - vm) * c;
        const float f = FAST ? ex2(dm * kLog2e) : expf(dm);
        if (ENT) u = f * fmaf(dm, s, u);
        s *= f;
      }
      m = vm;
    }
    // Where every element so far is -inf, m stands in as 0: those give exp(-inf) = 0, and a NaN
    // stays a NaN (it reaches s and the result, as it should).
    const float mb = m == -INFINITY ? 0.f : m;
#pragma unroll
    for (int e = 0; e < VE; ++e) {
      const float d = x[e] - mb;
      const float p = FAST ? ex2(d * k) : expf(d * c);
      s += p;
      if (ENT) u += p > 0.f ? p * (d * c) : 0.f;  // 0, not 0 * -inf, for x = -inf
    }
  }
};

// Threads a row by the row's vectors, up to 1024.
int threads_for(int64_t cols, int ve) {
  const int64_t vecs = ceil_div(cols, ve);
  if (vecs >= 4096) return kMaxThreads;
  if (vecs >= 1024) return 512;
  if (vecs >= 256) return 256;
  return 128;
}

// The same, but at most 256 where there are rows enough to give every SM four such blocks or more:
// many short blocks an SM keep the memory busy while others reduce, start or finish, and leave a
// smaller last wave. Registers stay the kernels' launch bounds' (written for 1024), so the threads
// an SM do not change. A/B on an H100, bf16 (`benchmarks/results/2026-12-07-h100-row-threads-ab.txt`):
// a win for the read-only rows of the token log-prob forward (selective log-probs at 8200 x 151936
// 0.868 -> 0.828 ms, 1032 rows 0.129 -> 0.122, 16400 rows 1.709 -> 1.635) and for the divergences of
// given distributions (fwd+bwd at 4096 x 151936: KL 1.404 -> 1.324, JSD 3.16 -> 3.10, TVD 1.362 ->
// 1.339 ms); a loss for CE + TVD (2.834 -> 2.890 ms), which keeps threads_for, as do the kernels not
// measured (the token log-prob backward, the distillation block kernel).
int threads_for_rows(int64_t rows, int64_t cols, int ve, int sm_count) {
  const int by_cols = threads_for(cols, ve);
  const int64_t sms = sm_count > 0 ? sm_count : 132;
  return rows >= 4 * sms && by_cols > 256 ? 256 : by_cols;
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
}  // namespace liger_cpp::kernels
