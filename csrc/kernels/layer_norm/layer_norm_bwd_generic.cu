// LayerNorm backward for any width and alignment: rows that are not whole
// 4-element vectors, and rows too wide for the pipelined kernels (above 8192
// 16-bit or 4096 fp32 columns). docs/kernels/layer_norm.md.
#include <algorithm>

#include "kernels/layer_norm/layer_norm_impl.h"
#include "kernels/layer_norm/layer_norm_kernels.cuh"

namespace liger_cpp::kernels {
namespace {

// Backward dx for any width: one block per row, the row read twice.
template <typename T, typename WT, int VEC>
__global__ void __launch_bounds__(512)
    ln_bwd_dx_generic(const T* __restrict__ dy, int64_t dy_stride, const T* __restrict__ x, int64_t x_stride,
                      const WT* __restrict__ w, const float* __restrict__ mean,
                      const float* __restrict__ rstd, T* __restrict__ dx, int64_t cols) {
  __shared__ float scratch[kGroupScratch];
  const int64_t row = blockIdx.x;
  const int64_t nvec = cols / VEC;
  const T* gr = dy + row * dy_stride;
  const T* xr = x + row * x_stride;
  const float m = mean[row], r = rstd[row];
  float sg = 0.f, sgx = 0.f;
  for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    const Vec<T, VEC> xv = load_vec<T, VEC>(xr + v * VEC);
    const Vec<T, VEC> gv = load_vec<T, VEC>(gr + v * VEC);
    float wf[VEC];
    load_param<WT, VEC>(w, v * VEC, 1.f, wf);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float g = to_float<T>(gv.v[j]) * wf[j];
      sg += g;
      sgx += g * (to_float<T>(xv.v[j]) - m) * r;
    }
  }
  sg = group_sum(sg, scratch);
  sgx = group_sum(sgx, scratch);
  const float a = sg / static_cast<float>(cols), bq = sgx / static_cast<float>(cols);
  T* dr = dx + row * cols;
  for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    const Vec<T, VEC> xv = load_vec<T, VEC>(xr + v * VEC);
    const Vec<T, VEC> gv = load_vec<T, VEC>(gr + v * VEC);
    float wf[VEC];
    load_param<WT, VEC>(w, v * VEC, 1.f, wf);
    Vec<T, VEC> out;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float xh = (to_float<T>(xv.v[j]) - m) * r;
      out.v[j] = from_float<T>(r * (to_float<T>(gv.v[j]) * wf[j] - a - xh * bq));
    }
    store_vec<T, VEC>(dr + v * VEC, out);
  }
}

// dW / dB partials for any width: blockIdx.x tiles the columns, blockIdx.y
// takes a fixed, strided subset of the rows.
template <typename T, int VEC>
__global__ void __launch_bounds__(256)
    ln_bwd_dwdb_generic(const T* __restrict__ dy, int64_t dy_stride, const T* __restrict__ x,
                        int64_t x_stride, const float* __restrict__ mean, const float* __restrict__ rstd,
                        float* __restrict__ pw, float* __restrict__ pb, int64_t rows, int64_t cols) {
  const int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= cols / VEC) return;
  float aw[VEC], ab[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) aw[j] = ab[j] = 0.f;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const Vec<T, VEC> gv = load_vec<T, VEC>(dy + row * dy_stride + v * VEC);
    if (pw) {
      const Vec<T, VEC> xv = load_vec<T, VEC>(x + row * x_stride + v * VEC);
      const float m = mean[row], r = rstd[row];
#pragma unroll
      for (int j = 0; j < VEC; ++j) aw[j] += to_float<T>(gv.v[j]) * ((to_float<T>(xv.v[j]) - m) * r);
    }
#pragma unroll
    for (int j = 0; j < VEC; ++j) ab[j] += to_float<T>(gv.v[j]);
  }
  const int64_t o = static_cast<int64_t>(blockIdx.y) * cols + v * VEC;
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    if (pw) pw[o + j] = aw[j];
    if (pb) pb[o + j] = ab[j];
  }
}

}  // namespace

namespace layer_norm_impl {

// The largest grid.x: more rows than this are launched in pieces.
constexpr int64_t kMaxGridRows = 2147483647;

cudaError_t launch_bwd_generic(const LayerNormBwdArgs& a, const LayerNormBwdPlan& p, float* pw, float* pb,
                               cudaStream_t stream) {
  return dispatch_ln_types(a.x_dtype, a.w_dtype, cudaErrorInvalidValue, [&](auto xt, auto wt) {
    using T = decltype(xt);
    using WT = decltype(wt);
    constexpr int full = 16 / sizeof(T);
    const T* dy = static_cast<const T*>(a.dy);
    const T* x = static_cast<const T*>(a.x);
    LIGER_DISPATCH_VEC(p.vec, full, {
      if (pw || pb) {
        const dim3 grid(static_cast<unsigned>(ceil_div(a.cols / VEC, 256)), static_cast<unsigned>(p.grid));
        ln_bwd_dwdb_generic<T, VEC><<<grid, 256, 0, stream>>>(dy, a.dy_row_stride, x, a.x_row_stride, a.mean,
                                                              a.rstd, pw, pb, a.rows, a.cols);
      }
      // dx: one block a row, launched in pieces of at most 2^31 - 1 rows (the largest grid).
      for (int64_t r0 = 0; r0 < a.rows; r0 += kMaxGridRows) {
        const unsigned grid = static_cast<unsigned>(std::min(a.rows - r0, kMaxGridRows));
        ln_bwd_dx_generic<T, WT, VEC>
            <<<grid, 512, 0, stream>>>(dy + r0 * a.dy_row_stride, a.dy_row_stride, x + r0 * a.x_row_stride,
                                       a.x_row_stride, static_cast<const WT*>(a.w), a.mean + r0, a.rstd + r0,
                                       static_cast<T*>(a.dx) + r0 * a.cols, a.cols);
        const cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) return err;
      }
    })
    return cudaSuccess;
  });
}

}  // namespace layer_norm_impl
}  // namespace liger_cpp::kernels
