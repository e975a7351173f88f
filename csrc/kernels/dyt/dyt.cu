// DyT: the plan and the kernels (element-wise, memory bound; the backward also reduces three
// parameter gradients over the rows). A block's tx threads cover tx * VEC consecutive columns, so
// gamma / beta are loaded once per thread and kept in registers while the thread walks its rows;
// each thread keeps U rows' loads in flight. The backward's per-column sums go to float32 partial
// rows (one per row group and ty lane), dalpha's to one float per block, and the norms' fixed-order
// reduction (reduce_partials.cuh) finishes them: deterministic, no atomics.
#include <type_traits>

#include "kernels/common/float_rows.cuh"
#include "kernels/dyt/dyt.h"
#include "kernels/norm/reduce_partials.cuh"

namespace liger_cpp::kernels {
namespace {

constexpr int kRowsInFlight = 4;  // U: rows a backward thread loads before it computes
constexpr int kFwdVectors = 2;    // vectors a forward thread loads before it computes
// The backward's blocks take many rows each, two blocks an SM (one wave, resident together: the
// launch bound keeps the registers within two 256-thread blocks), since each block's partial rows
// are read back by the reduction.
constexpr int kBwdBlocksPerSm = 2;

__device__ __forceinline__ double warp_sum_f64(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <typename WT, int VEC>
__device__ __forceinline__ void load_params(const WT* p, int64_t c0, float (&f)[VEC]) {
#pragma unroll
  for (int j = 0; j < VEC; ++j) f[j] = p != nullptr ? to_float<WT>(p[c0 + j]) : 0.f;
}

// Forward: a block per (row, column chunk) (Liger's and Inductor's grid: many short blocks, no
// partly filled last wave), tx threads with kFwdVectors vectors each, the row's vectors loaded
// before any is computed; gamma / beta loaded together as whole vectors after them (VEC > 1: the
// host hands them over aligned; HAS_BETA a template argument, so that no branch separates the two
// loads). Rows beyond the grid's limit loop.
template <typename T, typename WT, int VEC, bool HAS_BETA>
__global__ void __launch_bounds__(kDytThreads)
    dyt_fwd_kernel(const T* __restrict__ x, const WT* __restrict__ alpha, const WT* __restrict__ gamma,
                   const WT* __restrict__ beta, T* __restrict__ y, int64_t rows, int64_t cols) {
  constexpr int NV = kFwdVectors;
  const int64_t nvec = cols / VEC;
  const int64_t v0 = static_cast<int64_t>(blockIdx.y) * blockDim.x * NV + threadIdx.x;
  const float a = to_float<WT>(alpha[0]);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    T* yr = y + row * cols;
    Vec<T, VEC> xv[NV];
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int64_t v = v0 + static_cast<int64_t>(k) * blockDim.x;
      if (v < nvec) xv[k] = load_vec<T, VEC>(xr + v * VEC);
    }
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int64_t v = v0 + static_cast<int64_t>(k) * blockDim.x;
      if (v >= nvec) continue;
      const Vec<WT, VEC> g = load_vec<WT, VEC>(gamma + v * VEC);
      Vec<WT, VEC> b;
      if constexpr (HAS_BETA) b = load_vec<WT, VEC>(beta + v * VEC);
      float o[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        o[j] = to_float<WT>(g.v[j]) * tanhf(a * to_float<T>(xv[k].v[j]));
        if constexpr (HAS_BETA) o[j] += to_float<WT>(b.v[j]);
      }
      store_floats<T, VEC>(yr + v * VEC, o);
    }
  }
}

// Grid (row groups, column tiles). pg / pb: [partial_rows][cols] float32 (dgamma's, dbeta's); pa:
// [row_groups][col_tiles] (dalpha's).
template <typename T, typename WT, int VEC>
__global__ void __launch_bounds__(kDytThreads, kBwdBlocksPerSm)
    dyt_bwd_kernel(const T* __restrict__ x, const T* __restrict__ dy, const WT* __restrict__ alpha,
                   const WT* __restrict__ gamma, T* __restrict__ dx, float* __restrict__ pg,
                   float* __restrict__ pb, float* __restrict__ pa, int64_t rows, int64_t cols,
                   int64_t per_group) {
  __shared__ double warp_part[kDytThreads / 32];
  const int64_t c0 = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * VEC;
  const bool active = c0 < cols;
  const float a = to_float<WT>(alpha[0]);
  float g[VEC], acc_g[VEC], acc_b[VEC];
  // dalpha's terms of every row and column go into one sum: float64 keeps it exact to float32's
  // precision (a float32 sum of thousands of terms of both signs lost ~5 ulps; the float64 adds
  // cost nothing in a memory-bound loop).
  double acc_a = 0.0;
#pragma unroll
  for (int j = 0; j < VEC; ++j) acc_g[j] = acc_b[j] = g[j] = 0.f;
  if (active) {
    load_params<WT, VEC>(gamma, c0, g);
    const int64_t rb = static_cast<int64_t>(blockIdx.x) * per_group;
    const int64_t re = rb + per_group < rows ? rb + per_group : rows;
    const int64_t ty = blockDim.y;
    for (int64_t r0 = rb + threadIdx.y; r0 < re; r0 += kRowsInFlight * ty) {
      float xv[kRowsInFlight][VEC], gv[kRowsInFlight][VEC];
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) {
        if (r0 + u * ty >= re) continue;
        load_floats<T, VEC>(x + (r0 + u * ty) * cols + c0, xv[u]);
        load_floats<T, VEC>(dy + (r0 + u * ty) * cols + c0, gv[u]);
      }
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) {
        if (r0 + u * ty >= re) continue;
        float o[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float t = tanhf(a * xv[u][j]);
          const float d = 1.f - t * t;
          const float gd = gv[u][j] * g[j];
          o[j] = gd * a * d;
          acc_g[j] += gv[u][j] * t;
          acc_b[j] += gv[u][j];
          acc_a += static_cast<double>(gd * xv[u][j] * d);
        }
        store_floats<T, VEC>(dx + (r0 + u * ty) * cols + c0, o);
      }
    }
    const int64_t prow = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      pg[prow * cols + c0 + j] = acc_g[j];
      pb[prow * cols + c0 + j] = acc_b[j];
    }
  }
  // dalpha's block sum in a fixed order: warps, then the warps' sums by warp 0.
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  acc_a = warp_sum_f64(acc_a);
  if ((tid & 31) == 0) warp_part[tid >> 5] = acc_a;
  __syncthreads();
  if (tid < 32) {
    const int nw = (blockDim.x * blockDim.y) >> 5;
    double s = tid < nw ? warp_part[tid] : 0.0;
    s = warp_sum_f64(s);
    if (tid == 0) pa[static_cast<int64_t>(blockIdx.x) * gridDim.y + blockIdx.y] = static_cast<float>(s);
  }
}

}  // namespace

DytPlan plan_dyt(int64_t rows, int64_t cols, int elem_size, bool aligned, int sm_count, bool backward) {
  DytPlan p{};
  const int64_t vw = 16 / elem_size;
  p.vec = aligned && cols % vw == 0;
  const int64_t nv = ceil_div(cols, p.vec ? vw : 1);  // vectors (threads) a row
  constexpr int64_t kMaxGridX = 0x7fffffff;
  if (!backward) {
    // tx threads of kFwdVectors vectors a block: the fewest threads (>= 32, a power of two, <= 256)
    // that cover the row in one chunk, else 256-thread chunks. An H100 A/B of 128 / 256 threads x
    // 1 / 2 / 4 vectors: 2 vectors best at 2048-8192 columns (scripts/probes/dyt_fwd_layouts.cu).
    int tx = 32;
    while (tx < kDytThreads && tx * kFwdVectors < nv) tx *= 2;
    p.tx = tx;
    p.ty = 1;
    p.col_tiles = ceil_div(nv, static_cast<int64_t>(tx) * kFwdVectors);
    p.row_groups = rows < 1 ? 1 : (rows < kMaxGridX ? rows : kMaxGridX);
    p.rows_per_group = 1;
    p.partial_rows = 0;
    p.workspace_floats = 0;
    return p;
  }
  int tx = 32;
  while (tx < kDytThreads && tx < nv) tx *= 2;
  p.tx = tx;
  p.ty = kDytThreads / tx;
  p.col_tiles = ceil_div(nv, tx);
  const int64_t sms = sm_count > 0 ? sm_count : 132;
  int64_t groups = ceil_div(sms * kBwdBlocksPerSm, p.col_tiles);
  const int64_t max_groups = ceil_div(rows, p.ty);
  if (groups > max_groups) groups = max_groups;
  if (groups < 1) groups = 1;
  p.rows_per_group = rows > 0 ? ceil_div(rows, groups) : 1;
  p.row_groups = rows > 0 ? ceil_div(rows, p.rows_per_group) : 1;
  p.partial_rows = p.row_groups * p.ty;
  p.workspace_floats = 2 * p.partial_rows * cols + p.col_tiles * p.row_groups;
  return p;
}

cudaError_t dyt_fwd(const DytArgs& a, const DytPlan& p, cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return cudaSuccess;
  return dispatch_x_and_param_dtypes(a.dtype, a.wdtype, [&](auto tv, auto wv) -> cudaError_t {
    using T = decltype(tv);
    using WT = decltype(wv);
    constexpr int kVec = 16 / sizeof(T);
    const dim3 grid(static_cast<unsigned>(p.row_groups), static_cast<unsigned>(p.col_tiles));
    const dim3 block(p.tx, p.ty);
    const T* x = static_cast<const T*>(a.x);
    const WT *al = static_cast<const WT*>(a.alpha), *ga = static_cast<const WT*>(a.gamma),
             *be = static_cast<const WT*>(a.beta);
    T* y = static_cast<T*>(a.out);
    auto launch = [&](auto has_beta) {
      constexpr bool kBeta = decltype(has_beta)::value;
      if (p.vec)
        dyt_fwd_kernel<T, WT, kVec, kBeta><<<grid, block, 0, stream>>>(x, al, ga, be, y, a.rows, a.cols);
      else
        dyt_fwd_kernel<T, WT, 1, kBeta><<<grid, block, 0, stream>>>(x, al, ga, be, y, a.rows, a.cols);
    };
    if (be != nullptr)
      launch(std::true_type{});
    else
      launch(std::false_type{});
    return cudaGetLastError();
  });
}

cudaError_t dyt_bwd(const DytArgs& a, const DytPlan& p, cudaStream_t stream) {
  return dispatch_x_and_param_dtypes(a.dtype, a.wdtype, [&](auto tv, auto wv) -> cudaError_t {
    using T = decltype(tv);
    using WT = decltype(wv);
    if (a.rows == 0 || a.cols == 0) {  // empty sums: zero gradients (all-zero bits in every dtype)
      cudaError_t e = cudaMemsetAsync(a.dalpha, 0, sizeof(WT), stream);
      if (e == cudaSuccess && a.cols > 0) e = cudaMemsetAsync(a.dgamma, 0, sizeof(WT) * a.cols, stream);
      if (e == cudaSuccess && a.cols > 0) e = cudaMemsetAsync(a.dbeta, 0, sizeof(WT) * a.cols, stream);
      return e;
    }
    constexpr int kVec = 16 / sizeof(T);
    const dim3 grid(static_cast<unsigned>(p.row_groups), static_cast<unsigned>(p.col_tiles));
    const dim3 block(p.tx, p.ty);
    float* pg = a.workspace;
    float* pb = pg + p.partial_rows * a.cols;
    float* pa = pb + p.partial_rows * a.cols;
    const T *x = static_cast<const T*>(a.x), *dy = static_cast<const T*>(a.dy);
    const WT *al = static_cast<const WT*>(a.alpha), *ga = static_cast<const WT*>(a.gamma);
    T* dx = static_cast<T*>(a.out);
    if (p.vec)
      dyt_bwd_kernel<T, WT, kVec>
          <<<grid, block, 0, stream>>>(x, dy, al, ga, dx, pg, pb, pa, a.rows, a.cols, p.rows_per_group);
    else
      dyt_bwd_kernel<T, WT, 1>
          <<<grid, block, 0, stream>>>(x, dy, al, ga, dx, pg, pb, pa, a.rows, a.cols, p.rows_per_group);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    e = launch_reduce_partials<WT>(pg, static_cast<WT*>(a.dgamma), pb, static_cast<WT*>(a.dbeta),
                                   p.partial_rows, a.cols, stream);
    if (e != cudaSuccess) return e;
    return launch_reduce_partials<WT>(pa, static_cast<WT*>(a.dalpha), nullptr, nullptr,
                                      p.col_tiles * p.row_groups, 1, stream);
  });
}

}  // namespace liger_cpp::kernels
