// LayerNorm forward entry point (layer_norm_fwd: the plan's kernel launched)
// and the register-cached forward, ln_fwd_cached: the default for rows of up
// to 4096 16-byte vectors. docs/kernels/layer_norm.md.
#include "kernels/layer_norm/layer_norm_impl.h"
#include "kernels/layer_norm/layer_norm_kernels.cuh"
#include "kernels/norm/norm_plan.h"

namespace liger_cpp::kernels {
namespace {

// Forward, a row cached in registers: a group of TX threads (threadIdx.y
// selects the group, TY rows a block) owns one row and keeps it in registers
// as up to MAXV aligned vectors a thread, so each row is read from device
// memory once. w and b are loaded one vector at a time after the reductions
// (loading the weights before the variance reduction measured slower), and y
// is built as packed 32-bit words and stored as whole 16-byte st.global.v4
// (store_16B_words: nvcc may split a struct store).
template <typename T, typename WT, int VEC, int MAXV>
__global__ void __maxnreg__(48)
    ln_fwd_cached(const T* __restrict__ x, int64_t x_stride, const WT* __restrict__ w,
                  const WT* __restrict__ b, T* __restrict__ y, float* __restrict__ mean,
                  float* __restrict__ rstd, int64_t rows, int64_t cols, float eps, float inv_cols) {
  // inv_cols = 1 / cols from the host: the mean and variance scale by it
  // instead of a full IEEE division each (the same values for power-of-two
  // widths, else within an ulp): 1024 -> 864 instructions a thread-row at
  // 4096 bf16 columns. __maxnreg__(48) keeps ten 128-thread blocks a SM
  // (the host 1/cols took nvcc to 50 registers, i.e. nine).
  pdl_trigger();  // as rms_fwd_cached: the backward's blocks may fill this grid's tail
  __shared__ float scratch[kGroupScratch];
  __shared__ float scratch2[kGroupScratch];  // the variance's sum: see group_sum's FIRST_USE
  const int tx = threadIdx.x, TX = blockDim.x;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = row < rows;
  const int64_t nvec = cols / VEC;
  const T* xr = x + row * x_stride;
  Vec<T, VEC> xv[MAXV];
  // All loads first (volatile, so they stay ahead of the math and are in flight together).
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    const int64_t v = static_cast<int64_t>(i) * TX + tx;
    if (active && v < nvec) load_16B_volatile(xv[i], xr + v * VEC);
  }
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    const int64_t v = static_cast<int64_t>(i) * TX + tx;
    if (active && v < nvec) {
      float f[VEC];
      unpack_floats<T, VEC>(xv[i], f);
#pragma unroll
      for (int j = 0; j < VEC; ++j) s += f[j];
    }
  }
  const float m = group_sum</*FIRST_USE=*/true>(s, scratch) * inv_cols;
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    const int64_t v = static_cast<int64_t>(i) * TX + tx;
    if (active && v < nvec) {
      float f[VEC];
      unpack_floats<T, VEC>(xv[i], f);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float d = f[j] - m;
        ss += d * d;
      }
    }
  }
  ss = group_sum</*FIRST_USE=*/true>(ss, scratch2);  // its own scratch: no barrier to guard scratch
  if (!active) return;
  const float r = 1.f / sqrtf(ss * inv_cols + eps);
  if (tx == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
#pragma unroll
  for (int i = 0; i < MAXV; ++i) opaque_16B(xv[i]);
  T* yr = y + row * cols;
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    const int64_t v = static_cast<int64_t>(i) * TX + tx;
    if (v < nvec) {
      float wf[VEC], bf[VEC];
      load_param<WT, VEC>(w, v * VEC, 1.f, wf);
      load_param<WT, VEC>(b, v * VEC, 0.f, bf);
      float o[VEC], f[VEC];
      unpack_floats<T, VEC>(xv[i], f);
#pragma unroll
      for (int j = 0; j < VEC; ++j) o[j] = (f[j] - m) * r * wf[j] + bf[j];
      store_16B_words(yr + v * VEC, pack_vec<T, VEC>(o));
    }
  }
}

}  // namespace

namespace layer_norm_impl {

cudaError_t launch_fwd_cached(const LayerNormFwdArgs& a, const LayerNormFwdPlan& p, cudaStream_t stream) {
  const bool has_param = a.w != nullptr || a.b != nullptr;
  return dispatch_ln_types(
      a.x_dtype, has_param ? a.w_dtype : a.x_dtype, cudaErrorInvalidValue, [&](auto xt, auto wt) {
        using T = decltype(xt);
        using WT = decltype(wt);
        constexpr int full = 16 / sizeof(T);
        const dim3 block(static_cast<unsigned>(p.threads), static_cast<unsigned>(p.rows_per_block));
        ln_fwd_cached<T, WT, full, kMaxV><<<static_cast<unsigned>(p.grid), block, 0, stream>>>(
            static_cast<const T*>(a.x), a.x_row_stride, static_cast<const WT*>(a.w),
            static_cast<const WT*>(a.b), static_cast<T*>(a.y), a.mean, a.rstd, a.rows, a.cols, a.eps,
            1.f / static_cast<float>(a.cols));
        return cudaGetLastError();
      });
}

}  // namespace layer_norm_impl

cudaError_t layer_norm_fwd(const LayerNormFwdArgs& a, const LayerNormFwdPlan& p, cudaStream_t stream) {
  switch (p.kernel) {
    case LnFwdKernel::kCached:
      return layer_norm_impl::launch_fwd_cached(a, p, stream);
    case LnFwdKernel::kGeneric:
      return layer_norm_impl::launch_fwd_generic(a, p, stream);
    case LnFwdKernel::kNone:
      break;
  }
  return a.rows == 0 ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace liger_cpp::kernels
