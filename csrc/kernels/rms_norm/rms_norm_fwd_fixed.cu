// RMSNorm forward with the row width a compile-time constant: torch.compile's
// (Inductor's) kernel skeleton for hidden 4096 / 8192 / 16384, written as
// its SASS shows it (benchmarks/triton_rms_sass.py) and with the block size
// Inductor autotuned (benchmarks/inductor_rms_config.py), and the same
// skeleton with a run-time width (rms_fwd_fixed_rt, below) for the other
// widths of 129..2048 vectors: the default forward of plain RMSNorm where
// they apply (rms_norm_fwd_fixed.h).
// Its own .cu file: its kernels do not grow rms_norm.cu's module, which CUDA
// loads whole on the first RMSNorm call.
//
// One row a block of TX threads, each thread CH = COLS / (TX * VEC) 16-byte
// accesses:
//  * pass 1: all CH loads of x issued at once (L1 and L2 evict_last: the
//    row is read again soon), the sum of squares, the block reduction;
//  * pass 2, per access: x again (L1 and L2 evict_first: its last use; it
//    hits L1) and w (evict_last: every row reads it) loaded together, y
//    stored as one st.global.v4.
// Few registers (26-32), so 2048 threads a SM: 64-128 KiB of rows resident,
// which L1 keeps for the second read. Kernel times on the H200, bf16, against
// rms_fwd_cached (the register-cached forward): 20480x4096 80.5 (256 threads)
// against 84.1 us, 16384x8192 129.1 (512) against 133.2, 8192x16384 128.9
// (512) against 132.8 (benchmarks/results/2026-12-01-h200-norm-breakdown-
// fwd-fixed-9524c1a.log). Measured and dropped: 512 threads at 4096 (one
// access a thread, 4 rows a SM: 108.6 us), 256 at 16384 (8 rows of 32 KiB a
// SM overflow L1: 138.5), 1024 threads (199.3 at 8192), pass 2's loads all
// issued first (132.8 at 16384), no L1 priorities (131.4 / 130.9), and
// rsqrtf for rstd (128.1 at 8192: approximate, not worth 0.7 %).
#include "kernels/common/env_knob.h"
#include "kernels/norm/norm_common.cuh"
#include "kernels/rms_norm/rms_norm_fwd_fixed.h"

namespace liger_cpp::kernels {
namespace {

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

// The same skeleton with the width known only at run time (any whole number
// of 16-byte vectors), CH accesses a thread, blockDim.x = the row's vectors /
// CH rounded up to a warp; the accesses past the row are guarded. The
// default at the widths outside the compile-time list. Kernel times on the
// H200, bf16, 128 Mi elements, CH = 1 / 2 / 3 / 4 against the register-cached
// forward: hidden 3072 180.9 / 135.8 / 126.7 / 131.5 against 131.6 us, 5120
// 190.5 / 137.3 / 126.7 / 131.7 against 152.2, 6144 230.7 / 137.5 / 126.2 /
// 132.0 against 141.0, 14336 (CH >= 4 above 1024 threads) 130.1 / 135.9 at
// CH = 3 / 4 against 132.1; at 4096 CH = 3 reads 128.8 against 125.7 for the
// compile-time kernel (2026-12-01-h200-norm-breakdown-fwd-ch-aca6894.log).
// Three accesses: 9 blocks of 224 threads a SM at 5120 (90 KiB of rows for
// L1), against 6 of 320 at CH = 2. From 129 vectors: at 1536 / 2048 127.5 /
// 128.1 against 132.6 / 129.9 us for the register-cached forward; at 1024
// (128 vectors, 43-thread rows) 159.3 against 131.0
// (2026-12-01-h200-norm-breakdown-fwd-gen-narrow-eecdc47.log).
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

// Accesses a thread in rms_fwd_fixed_rt: 3 (see above; at most 683
// threads for 2048 vectors). LIGER_CPP_RMS_FWD_CH=2|3|4 (read on every call,
// A/B) overrides it where the block stays within 1024 threads. 1, 5, 6 and 8
// were measured no faster anywhere (above; 5 / 6 at 10240..16384 131.6-133.7
// us, 2026-12-01-h200-norm-breakdown-fwd-gen-narrow-eecdc47.log) and were
// removed: each pair of instances grew this module, loaded on the first call.
int rt_accesses(int64_t nvec) {
  const int i = env_choice("LIGER_CPP_RMS_FWD_CH", {"2", "3", "4"});
  if (i >= 0 && ceil_div(nvec, i + 2) <= 1024) return i + 2;
  return 3;
}

template <typename T>
auto rt_kernel(int ch) {
  return ch == 2 ? &rms_fwd_fixed_rt<T, 2> : ch == 4 ? &rms_fwd_fixed_rt<T, 4> : &rms_fwd_fixed_rt<T, 3>;
}

// Rows of min_vec..2048 vectors (by default 129..2048: 16-bit hidden
// 1032..16384; gen from 64), ch accesses a thread (rt_accesses); false for
// other widths.
template <typename T>
bool launch_rt(const RmsNormFwdArgs& a, int64_t min_vec, cudaStream_t stream, cudaError_t* err) {
  constexpr int VEC = 16 / sizeof(T);
  const int64_t nvec = a.cols / VEC;
  if (a.cols % VEC != 0 || nvec < min_vec || nvec > 2048) return false;
  const int ch = rt_accesses(nvec);
  const unsigned tx = static_cast<unsigned>(ceil_div(ceil_div(nvec, ch), 32) * 32);
  rt_kernel<T>(ch)<<<static_cast<unsigned>(a.rows), tx, 0, stream>>>(
      static_cast<const T*>(a.x), a.x_row_stride, static_cast<const T*>(a.w), static_cast<T*>(a.y), a.rstd,
      static_cast<int>(a.cols), a.eps, a.offset, a.casting == RmsCasting::kLlama);
  *err = cudaGetLastError();
  return true;
}

template <typename T, int COLS, int TX>
cudaError_t launch(const RmsNormFwdArgs& a, cudaStream_t stream) {
  rms_fwd_fixed<T, COLS, TX><<<static_cast<unsigned>(a.rows), TX, 0, stream>>>(
      static_cast<const T*>(a.x), a.x_row_stride, static_cast<const T*>(a.w), static_cast<T*>(a.y), a.rstd,
      a.eps, a.offset, a.casting == RmsCasting::kLlama);
  return cudaGetLastError();
}

// Threads a row: 256 for 8 KiB rows, 512 for 16 and 32 KiB (see above);
// kT256 / kT512 force one (A/B).
template <typename T, int COLS>
bool by_variant(const RmsNormFwdArgs& a, FwdFixed v, cudaStream_t stream, cudaError_t* err) {
  constexpr int kDefaultTx = COLS * sizeof(T) <= 8192 ? 256 : 512;
  const int tx = v == FwdFixed::kT256 ? 256 : v == FwdFixed::kT512 ? 512 : kDefaultTx;
  *err = tx == 256 ? launch<T, COLS, 256>(a, stream) : launch<T, COLS, 512>(a, stream);
  return true;
}

template <typename T>
bool by_cols(const RmsNormFwdArgs& a, FwdFixed v, cudaStream_t stream, cudaError_t* err) {
  if (v == FwdFixed::kGen) return launch_rt<T>(a, 64, stream, err);
  switch (a.cols) {
    case 4096:
      return by_variant<T, 4096>(a, v, stream, err);
    case 8192:
      return by_variant<T, 8192>(a, v, stream, err);
    case 16384:
      return by_variant<T, 16384>(a, v, stream, err);
    default:
      return v == FwdFixed::kOn && launch_rt<T>(a, 129, stream, err);
  }
}

}  // namespace

bool rms_norm_fwd_fixed(const RmsNormFwdArgs& a, FwdFixed v, cudaStream_t stream, cudaError_t* err) {
  if (v == FwdFixed::kOff || a.res != nullptr || a.w == nullptr || a.rows > INT32_MAX) return false;
  if (a.w_dtype != a.x_dtype || a.y_dtype != a.x_dtype) return false;
  const int64_t stride_bytes = a.x_row_stride * 2;  // 16-bit x only (below)
  if (!is_aligned(a.x, 16) || !is_aligned(a.w, 16) || !is_aligned(a.y, 16) || stride_bytes % 16 != 0)
    return false;
  switch (a.x_dtype) {
    case DType::kBFloat16:
      return by_cols<__nv_bfloat16>(a, v, stream, err);
    case DType::kFloat16:
      return by_cols<__half>(a, v, stream, err);
    default:
      return false;
  }
}

}  // namespace liger_cpp::kernels
