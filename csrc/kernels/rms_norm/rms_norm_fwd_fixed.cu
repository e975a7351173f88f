// RMSNorm forward with torch.compile's (Inductor's) kernel skeleton, written
// as its SASS shows it (benchmarks/triton_rms_sass.py) and with the block size
// Inductor autotuned (benchmarks/inductor_rms_config.py): the default forward
// of plain RMSNorm with a weight and x, w and y of one 16-bit dtype, at rows of
// 129..2048 16-byte vectors (hidden 1032..16384). The row width is a
// compile-time constant at hidden 4096 / 8192 / 16384 (rms_fwd_fixed) and a
// run-time one elsewhere (rms_fwd_fixed_rt). Its own .cu file, i.e. its own
// CUDA module, loaded by the first call that runs it: the module of the
// default forward at common widths holds nothing else.
//
// One row a block of TX threads, each thread CH = COLS / (TX * VEC) 16-byte
// accesses:
//  * pass 1: all CH loads of x issued at once (L1 and L2 evict_last: the
//    row is read again soon), the sum of squares, the block reduction;
//  * pass 2, per access: x again (L1 and L2 evict_first: its last use; it
//    hits L1) and w (evict_last: every row reads it) loaded together, y
//    stored as one st.global.v4.
// Few registers (26-32), so 2048 threads a SM: 64-128 KiB of rows resident,
// which L1 keeps for the second read. Block sizes, access counts and the
// variants measured and dropped: docs/kernels/rms_norm.md.
#include "kernels/norm/norm_common.cuh"
#include "kernels/rms_norm/rms_norm_impl.h"

namespace liger_cpp::kernels {
namespace {

using rms_norm_impl::fixed_threads;
using rms_norm_impl::kFixedRtAccesses;

template <typename T, int COLS, int TX>
__global__ void __launch_bounds__(TX)
    rms_fwd_fixed(const T* __restrict__ x, int64_t x_stride, const T* __restrict__ w, T* __restrict__ y,
                  float* __restrict__ rstd, float eps, float offset, bool llama) {
  constexpr int VEC = 16 / sizeof(T);
  constexpr int STEP = TX * VEC;  // columns a pass of the block covers
  static_assert(COLS % STEP == 0, "whole accesses");
  constexpr int CH = COLS / STEP;
  pdl_trigger();  // as rms_fwd_cached: a PDL-launched backward may fill this grid's tail
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int col0 = threadIdx.x * VEC;
  const T* xr = x + row * x_stride + col0;
  const uint64_t keep = l2_evict_policy<true>();
  Vec<T, VEC> a[CH];
#pragma unroll
  for (int c = 0; c < CH; ++c) load_16B_hint<kL1Last>(a[c], xr + c * STEP, keep);
  float acc[VEC] = {};
#pragma unroll
  for (int c = 0; c < CH; ++c) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float f = to_float<T>(a[c].v[j]);
      acc[j] += f * f;
    }
  }
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < VEC; ++j) ss += acc[j];
  ss = group_sum</*FIRST_USE=*/true>(ss, scratch);
  const float m = ss / static_cast<float>(COLS) + eps;
  const float r = 1.f / sqrtf(m);
  if (threadIdx.x == 0) rstd[row] = r;
  const uint64_t drop = l2_evict_policy<false>();
  T* yr = y + row * COLS + col0;
  const T* wr = w + col0;
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    Vec<T, VEC> xv, wv;
    load_16B_hint<kL1First>(xv, xr + c * STEP, drop);
    load_16B_hint<kL1Last>(wv, wr + c * STEP, keep);
    float o[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      o[j] = normed<T>(to_float<T>(xv.v[j]), r, llama) * (to_float<T>(wv.v[j]) + offset);
    store_16B_words(yr + c * STEP, pack_vec<T, VEC>(o));
  }
}

template <typename T, int CH>
__global__ void __launch_bounds__(1024)
    rms_fwd_fixed_rt(const T* __restrict__ x, int64_t x_stride, const T* __restrict__ w, T* __restrict__ y,
                     float* __restrict__ rstd, int cols, float eps, float offset, bool llama) {
  constexpr int VEC = 16 / sizeof(T);
  pdl_trigger();
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int nvec = cols / VEC, TX = blockDim.x, tx = threadIdx.x;
  const T* xr = x + row * x_stride;
  const uint64_t keep = l2_evict_policy<true>();
  Vec<T, VEC> a[CH];
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int v = c * TX + tx;
    if (v < nvec) {
      load_16B_hint<kL1Last>(a[c], xr + v * VEC, keep);
    } else {
      uint32_t* z = reinterpret_cast<uint32_t*>(&a[c]);
      z[0] = z[1] = z[2] = z[3] = 0u;
    }
  }
  float acc[VEC] = {};
#pragma unroll
  for (int c = 0; c < CH; ++c) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float f = to_float<T>(a[c].v[j]);
      acc[j] += f * f;
    }
  }
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < VEC; ++j) ss += acc[j];
  ss = group_sum</*FIRST_USE=*/true>(ss, scratch);
  const float r = 1.f / sqrtf(ss / static_cast<float>(cols) + eps);
  if (tx == 0) rstd[row] = r;
  const uint64_t drop = l2_evict_policy<false>();
  T* yr = y + row * cols;
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int v = c * TX + tx;
    if (v >= nvec) break;
    Vec<T, VEC> xv, wv;
    load_16B_hint<kL1First>(xv, xr + v * VEC, drop);
    load_16B_hint<kL1Last>(wv, w + v * VEC, keep);
    float o[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      o[j] = normed<T>(to_float<T>(xv.v[j]), r, llama) * (to_float<T>(wv.v[j]) + offset);
    store_16B_words(yr + v * VEC, pack_vec<T, VEC>(o));
  }
}

template <typename T, int COLS>
cudaError_t launch_fixed(const RmsNormFwdArgs& a, const RmsNormFwdPlan& p, cudaStream_t stream) {
  constexpr int kTx = fixed_threads(COLS * static_cast<int64_t>(sizeof(T)));
  if (p.threads != kTx) return cudaErrorInvalidValue;  // no such build
  rms_fwd_fixed<T, COLS, kTx><<<static_cast<unsigned>(p.grid), kTx, 0, stream>>>(
      static_cast<const T*>(a.x), a.x_row_stride, static_cast<const T*>(a.w), static_cast<T*>(a.y), a.rstd,
      a.eps, a.offset, a.casting == RmsCasting::kLlama);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_t(const RmsNormFwdArgs& a, const RmsNormFwdPlan& p, cudaStream_t stream) {
  if (p.kernel == RmsFwdKernel::kFixedRt) {
    rms_fwd_fixed_rt<T, kFixedRtAccesses>
        <<<static_cast<unsigned>(p.grid), static_cast<unsigned>(p.threads), 0, stream>>>(
            static_cast<const T*>(a.x), a.x_row_stride, static_cast<const T*>(a.w), static_cast<T*>(a.y),
            a.rstd, static_cast<int>(a.cols), a.eps, a.offset, a.casting == RmsCasting::kLlama);
    return cudaGetLastError();
  }
  switch (a.cols) {
    case 4096:
      return launch_fixed<T, 4096>(a, p, stream);
    case 8192:
      return launch_fixed<T, 8192>(a, p, stream);
    case 16384:
      return launch_fixed<T, 16384>(a, p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

namespace rms_norm_impl {

cudaError_t launch_fwd_fixed(const RmsNormFwdArgs& a, const RmsNormFwdPlan& p, cudaStream_t stream) {
  switch (a.x_dtype) {
    case DType::kBFloat16:
      return launch_t<__nv_bfloat16>(a, p, stream);
    case DType::kFloat16:
      return launch_t<__half>(a, p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace rms_norm_impl
}  // namespace liger_cpp::kernels
