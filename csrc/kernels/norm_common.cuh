// Helpers shared by the row-wise norm kernels (RMSNorm, FusedAddRMSNorm,
// LayerNorm): launch planning for the register-cached row kernels, weight
// loads, and the fixed-order reduction of per-block fp32 partial sums.
// Everything is in an unnamed namespace: each .cu gets its own copy (kernels
// included), so no template kernel is shared across translation units.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "common.cuh"

namespace liger_cpp::kernels {
namespace {

constexpr int kGroupScratch = 32 * 32;  // floats: up to 32 groups x 32 warps
// Vectors per thread in the cached kernels: 4 x 16 bytes in flight per operand
// and thread; more spills in the backward (measured with -Xptxas -v).
constexpr int kMaxV = 4;
// Largest row the generic forward stashes in shared memory.
constexpr int64_t kMaxStashBytes = 160 * 1024;

// (w + offset) for VEC consecutive columns starting at column c (a multiple
// of VEC), loaded as one aligned access; all ones without a weight.
template <typename WT, int VEC>
__device__ __forceinline__ void load_weight(const WT* w, int64_t c, float offset, float (&out)[VEC]) {
  if (w == nullptr) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[j] = 1.f;
    return;
  }
  const Vec<WT, VEC> wv = load_vec<WT, VEC>(w + c);
#pragma unroll
  for (int j = 0; j < VEC; ++j) out[j] = to_float<WT>(wv.v[j]) + offset;
}

// dw[c] = sum_g partial[g][c] in a fixed order: 32 columns per block, the
// blockDim.y threads of a column each sum a strided slice, then a fixed tree.
// The slice is loaded 8 rows at a time before they are added (in order): one
// load at a time was a chain of ~17 L2 round trips (9 us for 264 x 4096).
template <typename WT>
__global__ void __launch_bounds__(512)
    reduce_partials(const float* __restrict__ partial, int64_t groups, int64_t cols, WT* __restrict__ dw) {
  __shared__ float s[16][33];
  constexpr int kBatch = 8;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t ystep = blockDim.y;
  float acc = 0.f;
  if (c < cols)
    for (int64_t g0 = threadIdx.y; g0 < groups; g0 += kBatch * ystep) {
      float v[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int64_t g = g0 + k * ystep;
        v[k] = g < groups ? partial[g * cols + c] : 0.f;
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k)
        if (g0 + k * ystep < groups) acc += v[k];
    }
  s[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  for (int h = blockDim.y / 2; h > 0; h >>= 1) {
    if (static_cast<int>(threadIdx.y) < h) s[threadIdx.y][threadIdx.x] += s[threadIdx.y + h][threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && c < cols) dw[c] = from_float<WT>(s[0][threadIdx.x]);
}

struct Plan {
  bool cached = false;
  int vec = 1, tx = 32, ty = 1;
  bool stash = false;     // forward generic: row stashed in shared memory
  bool dw_smem = false;   // backward cached: dW partials in shared memory
  int64_t grid = 0;       // backward: persistent blocks (cached) or row splits (generic)
  int64_t ws_floats = 0;  // backward workspace
};

int next_pow2(int64_t n) {
  int p = 32;
  while (p < n) p <<= 1;
  return p;
}

// Chooses the cached layout: TX (power of two >= 32) threads per row, MAXV
// vectors per thread, TY rows per block.
bool pick_cached(int64_t nvec, Plan& p) {
  const int64_t tx = next_pow2((nvec + kMaxV - 1) / kMaxV);
  if (tx > 1024) return false;
  p.cached = true;
  p.tx = static_cast<int>(tx);
  p.ty = std::max(1, 256 / p.tx);
  return true;
}

// True when every row of every operand starts on a whole vector of `vec`
// elements: widths and row strides divisible by vec, and each base pointer
// aligned to vec elements of its own type (given with it, in bytes).
bool all_aligned(int vec, int64_t cols, std::initializer_list<int64_t> strides,
                 std::initializer_list<std::pair<const void*, int>> ptrs) {
  if (cols % vec != 0) return false;
  for (int64_t s : strides)
    if (s % vec != 0) return false;
  for (const auto& q : ptrs)
    if (q.first && !is_aligned(q.first, vec * q.second)) return false;
  return true;
}

#define LIGER_DISPATCH_VEC(vec, VEC_FULL, ...) \
  if ((vec) == 1) {                            \
    constexpr int VEC = 1;                     \
    __VA_ARGS__                                \
  } else {                                     \
    constexpr int VEC = VEC_FULL;              \
    __VA_ARGS__                                \
  }

int sm_blocks(const void* kernel, int threads, size_t smem) {
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem) != cudaSuccess) n = 1;
  return std::max(n, 1);
}

}  // namespace
}  // namespace liger_cpp::kernels
