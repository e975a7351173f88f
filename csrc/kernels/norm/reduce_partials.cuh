// The fixed-order reduction of the norm backwards' per-block fp32 partial
// rows into dW (and LayerNorm's dB): deterministic, no atomics. In an unnamed
// namespace, as norm_common.cuh.
#pragma once

#include "kernels/common/common.cuh"
#include "kernels/common/launch_cache.h"

namespace liger_cpp::kernels {
namespace {

// dw[c] = sum_g partial[g][c] in a fixed order: 32 columns per block, the
// blockDim.y threads of a column each sum a strided slice, then a fixed tree.
// The slice is loaded 8 rows at a time before they are added (in order): one
// load at a time was a chain of ~17 L2 round trips.
template <typename WT>
__global__ void __launch_bounds__(512)
    reduce_partials(const float* __restrict__ partial, int64_t groups, int64_t cols, WT* __restrict__ dw) {
  pdl_wait();  // launched with PDL after the backward that wrote `partial`
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

// As reduce_partials, for rows of a multiple of 4 floats (16-byte aligned):
// after the backward, the reduction's time is latency (reduce_partials: ~17
// loads a thread in batches, then a 4-barrier tree). Here a block of 256 threads
// takes 16 columns: thread t loads float4 lane t & 3 of rows g, g + 64, ...
// (g = t >> 2), all of a batch in flight at once (one L2 round trip for up to
// 512 groups), sums them in row order; then ONE barrier and each column's 64
// slice sums are added 4 at a time and finished by a 16-lane butterfly (every
// lane gets the same bits). Fixed order: deterministic. blockIdx.y picks the
// (partial, out) pair: 0 -> (p0, d0), 1 -> (p1, d1) (LayerNorm's dW and dB);
// a null partial skips its half.
template <typename WT>
__global__ void __launch_bounds__(256)
    reduce_partials4(const float* __restrict__ p0, WT* __restrict__ d0, const float* __restrict__ p1,
                     WT* __restrict__ d1, int64_t groups, int64_t cols) {
  pdl_wait();  // launched with PDL after the backward that wrote the partials
  constexpr int kSlices = 64, kBatch = 8;
  __shared__ float s[kSlices][17];
  const float* part = blockIdx.y == 0 ? p0 : p1;
  WT* dst = blockIdx.y == 0 ? d0 : d1;
  if (part == nullptr) return;  // uniform across the block
  const int q = threadIdx.x & 3, g0 = threadIdx.x >> 2;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * 16 + q * 4;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  if (c0 < cols) {
    for (int64_t gb = g0; gb < groups; gb += kSlices * kBatch) {
      float4 v[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int64_t g = gb + k * kSlices;
        v[k] = g < groups ? *reinterpret_cast<const float4*>(part + g * cols + c0)
                          : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        if (gb + k * kSlices < groups) {
          acc[0] += v[k].x;
          acc[1] += v[k].y;
          acc[2] += v[k].z;
          acc[3] += v[k].w;
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) s[g0][q * 4 + j] = acc[j];
  __syncthreads();
  const int c = threadIdx.x >> 4, k = threadIdx.x & 15;  // column c of 16, slices 4k..4k+3
  float v = ((s[4 * k][c] + s[4 * k + 1][c]) + s[4 * k + 2][c]) + s[4 * k + 3][c];
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 16 + c;
  if (k == 0 && col < cols) dst[col] = from_float<WT>(v);
}

// Finishes dW (and dB) from fp32 partial rows [groups][cols] in fixed order:
// reduce_partials4 where the rows are whole float4s, else the per-column
// kernels. All launched with PDL (they wait for the backward's writes).
template <typename WT>
cudaError_t launch_reduce_partials(const float* p0, WT* d0, const float* p1, WT* d1, int64_t groups,
                                   int64_t cols, cudaStream_t stream) {
  const bool aligned4 =
      cols % 4 == 0 && (p0 == nullptr || is_aligned(p0, 16)) && (p1 == nullptr || is_aligned(p1, 16));
  if (aligned4) {
    const dim3 grid(static_cast<unsigned>(ceil_div(cols, 16)), p1 != nullptr ? 2u : 1u);
    return launch_pdl(&reduce_partials4<WT>, grid, dim3(256), 0, stream, p0, d0, p1, d1, groups, cols);
  }
  const dim3 grid(static_cast<unsigned>(ceil_div(cols, 32)));
  for (int h = 0; h < 2; ++h) {
    const float* p = h == 0 ? p0 : p1;
    if (p == nullptr) continue;
    const cudaError_t err =
        launch_pdl(&reduce_partials<WT>, grid, dim3(32, 16), 0, stream, p, groups, cols, h == 0 ? d0 : d1);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace
}  // namespace liger_cpp::kernels
