// RMSNorm backward for any width and alignment: rows that are not whole
// 16-byte vectors, and rows too wide for the cached kernels (above 8192
// vectors on sm_90, 4096 without sm_90 code). docs/kernels/rms_norm.md.
#include <algorithm>

#include "kernels/norm/norm_plan.h"
#include "kernels/rms_norm/rms_norm_impl.h"
#include "kernels/rms_norm/rms_norm_kernels.cuh"

namespace liger_cpp::kernels {
namespace {

// Backward dx for any width: one block per row, the row is read twice.
template <typename T, typename WT, typename OT, int VEC>
__global__ void __launch_bounds__(512)
    rms_bwd_dx_generic(const OT* dy, int64_t dy_stride, const T* __restrict__ x, int64_t x_stride,
                       const WT* __restrict__ w, const float* __restrict__ rstd, const T* ds_out,
                       int64_t ds_out_stride, T* dx, int64_t dx_stride, int64_t cols, float offset) {
  __shared__ float scratch[kGroupScratch];
  const int64_t row = blockIdx.x;
  const int64_t nvec = cols / VEC;
  const OT* gr = dy + row * dy_stride;
  const T* xr = x + row * x_stride;
  float dot = 0.f;
  for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    const Vec<T, VEC> xv = load_vec<T, VEC>(xr + v * VEC);
    const Vec<OT, VEC> gv = load_vec<OT, VEC>(gr + v * VEC);
    float wf[VEC];
    load_weight<WT, VEC>(w, v * VEC, offset, wf);
#pragma unroll
    for (int j = 0; j < VEC; ++j) dot += to_float<OT>(gv.v[j]) * wf[j] * to_float<T>(xv.v[j]);
  }
  dot = group_sum(dot, scratch);
  const float r = rstd[row];
  const float c = r * r * r * dot / static_cast<float>(cols);
  T* dr = dx + row * dx_stride;
  for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    const Vec<T, VEC> xv = load_vec<T, VEC>(xr + v * VEC);
    const Vec<OT, VEC> gv = load_vec<OT, VEC>(gr + v * VEC);
    float wf[VEC];
    load_weight<WT, VEC>(w, v * VEC, offset, wf);
    float d[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) d[j] = 0.f;
    add_ds_out<T, VEC>(d, ds_out ? ds_out + row * ds_out_stride + v * VEC : nullptr);
    Vec<T, VEC> out;
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      out.v[j] = from_float<T>(r * to_float<OT>(gv.v[j]) * wf[j] - c * to_float<T>(xv.v[j]) + d[j]);
    store_vec<T, VEC>(dr + v * VEC, out);
  }
}

// dW partials for any width: blockIdx.x tiles the columns, blockIdx.y picks a
// fixed, strided subset of the rows. Must run before an in-place dx overwrites dy.
template <typename T, typename OT, int VEC>
__global__ void __launch_bounds__(256)
    rms_bwd_dw_generic(const OT* dy, int64_t dy_stride, const T* __restrict__ x, int64_t x_stride,
                       const float* __restrict__ rstd, float* __restrict__ partial, int64_t rows,
                       int64_t cols, bool llama) {
  const int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= cols / VEC) return;
  float acc[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) acc[j] = 0.f;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const Vec<T, VEC> xv = load_vec<T, VEC>(x + row * x_stride + v * VEC);
    const Vec<OT, VEC> gv = load_vec<OT, VEC>(dy + row * dy_stride + v * VEC);
    const float r = rstd[row];
#pragma unroll
    for (int j = 0; j < VEC; ++j) acc[j] += to_float<OT>(gv.v[j]) * normed<T>(to_float<T>(xv.v[j]), r, llama);
  }
  float* out = partial + static_cast<int64_t>(blockIdx.y) * cols + v * VEC;
#pragma unroll
  for (int j = 0; j < VEC; ++j) out[j] = acc[j];
}

}  // namespace

namespace rms_norm_impl {

// The largest grid.x: more rows than this are launched in pieces.
constexpr int64_t kMaxGridRows = 2147483647;

cudaError_t launch_bwd_generic(const RmsNormBwdArgs& a, const RmsNormBwdPlan& p, float* partial,
                               cudaStream_t stream) {
  const bool llama = a.casting == RmsCasting::kLlama;
  return dispatch_types(
      a.x_dtype, a.w ? a.w_dtype : a.x_dtype, a.y_dtype, cudaErrorInvalidValue,
      [&](auto xt, auto wt, auto yt) {
        using T = decltype(xt);
        using WT = decltype(wt);
        using OT = decltype(yt);
        constexpr int full = 16 / sizeof(T);
        const OT* dy = static_cast<const OT*>(a.dy);
        const T* x = static_cast<const T*>(a.x);
        LIGER_DISPATCH_VEC(p.vec, full, {
          if (partial) {  // dW first: an in-place dx below overwrites dy
            const dim3 grid(static_cast<unsigned>(ceil_div(a.cols / VEC, 256)),
                            static_cast<unsigned>(p.grid));
            rms_bwd_dw_generic<T, OT, VEC><<<grid, 256, 0, stream>>>(dy, a.dy_row_stride, x, a.x_row_stride,
                                                                     a.rstd, partial, a.rows, a.cols, llama);
          }
          // dx: one block a row, launched in pieces of at most 2^31 - 1 rows (the largest grid).
          const T* ds_out = static_cast<const T*>(a.ds_out);
          for (int64_t r0 = 0; r0 < a.rows; r0 += kMaxGridRows) {
            const unsigned grid = static_cast<unsigned>(std::min(a.rows - r0, kMaxGridRows));
            rms_bwd_dx_generic<T, WT, OT, VEC><<<grid, 512, 0, stream>>>(
                dy + r0 * a.dy_row_stride, a.dy_row_stride, x + r0 * a.x_row_stride, a.x_row_stride,
                static_cast<const WT*>(a.w), a.rstd + r0,
                ds_out ? ds_out + r0 * a.ds_out_row_stride : nullptr, a.ds_out_row_stride,
                static_cast<T*>(a.dx) + r0 * a.dx_row_stride, a.dx_row_stride, a.cols, a.offset);
            const cudaError_t err = cudaGetLastError();
            if (err != cudaSuccess) return err;
          }
        })
        return cudaSuccess;
      });
}

}  // namespace rms_norm_impl
}  // namespace liger_cpp::kernels
