// RMSNorm forward with the row width a compile-time constant: torch.compile's
// (Inductor's) kernel skeleton for hidden 4096 / 8192 / 16384, written as
// its SASS shows it (benchmarks/triton_rms_sass.py), as an A/B experiment
// against rms_fwd_cached (LIGER_CPP_RMS_FWD_FIXED, see rms_norm_fwd_fixed.h).
// Its own .cu file: its kernels do not grow rms_norm.cu's module, which CUDA
// loads whole on the first RMSNorm call.
//
// One row a block of TX threads, each thread CH = COLS / (TX * VEC) 16-byte
// accesses:
//  * pass 1: all CH loads of x issued at once (L1 and L2 evict_last: the
//    row is read again soon), the sum of squares, the block reduction;
//  * pass 2, per access: x again (L1 and L2 evict_first: its last use) and w
//    (evict_last: every row reads it) loaded together, y stored as one
//    st.global.v4.
// Modes (all compute the same values): kSeq as above; kRsq with rsqrtf
// (MUFU.RSQ, approximate: measurement only) instead of 1 / sqrtf; kPre with
// pass 2's loads all issued before its first store; kNoL1 with the L2
// policies only.
#include "norm_common.cuh"
#include "rms_norm_fwd_fixed.h"

namespace liger_cpp::kernels {
namespace {

enum FixedMode : int { kSeq = 0, kRsq = 1, kPre = 2, kNoL1 = 3 };

template <typename T, int COLS, int TX, int MODE>
__global__ void __launch_bounds__(TX)
    rms_fwd_fixed(const T* __restrict__ x, int64_t x_stride, const T* __restrict__ w, T* __restrict__ y,
                  float* __restrict__ rstd, float eps, float offset, bool llama) {
  constexpr int VEC = 16 / sizeof(T);
  constexpr int STEP = TX * VEC;  // columns a pass of the block covers
  static_assert(COLS % STEP == 0, "whole accesses");
  constexpr int CH = COLS / STEP;
  constexpr int L1K = MODE == kNoL1 ? kL1Default : kL1Last;
  constexpr int L1D = MODE == kNoL1 ? kL1Default : kL1First;
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int col0 = threadIdx.x * VEC;
  const T* xr = x + row * x_stride + col0;
  const uint64_t keep = l2_evict_policy<true>();
  Vec<T, VEC> a[CH];
#pragma unroll
  for (int c = 0; c < CH; ++c) load_16B_hint<L1K>(a[c], xr + c * STEP, keep);
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
  const float r = MODE == kRsq ? rsqrtf(m) : 1.f / sqrtf(m);
  if (threadIdx.x == 0) rstd[row] = r;
  const uint64_t drop = l2_evict_policy<false>();
  T* yr = y + row * COLS + col0;
  const T* wr = w + col0;
  auto out = [&](const Vec<T, VEC>& xv, const Vec<T, VEC>& wv, int c) {
    float o[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float v = to_float<T>(xv.v[j]) * r;
      o[j] = (llama ? round_through<T>(v) : v) * (to_float<T>(wv.v[j]) + offset);
    }
    store_16B_words(yr + c * STEP, pack_vec<T, VEC>(o));
  };
  if constexpr (MODE == kPre) {
    Vec<T, VEC> xv[CH], wv[CH];
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      load_16B_hint<L1D>(xv[c], xr + c * STEP, drop);
      load_16B_hint<L1K>(wv[c], wr + c * STEP, keep);
    }
#pragma unroll
    for (int c = 0; c < CH; ++c) out(xv[c], wv[c], c);
  } else {
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      Vec<T, VEC> xv, wv;
      load_16B_hint<L1D>(xv, xr + c * STEP, drop);
      load_16B_hint<L1K>(wv, wr + c * STEP, keep);
      out(xv, wv, c);
    }
  }
}

template <typename T, int COLS, int TX, int MODE>
cudaError_t launch(const RmsNormFwdArgs& a, cudaStream_t stream) {
  rms_fwd_fixed<T, COLS, TX, MODE><<<static_cast<unsigned>(a.rows), TX, 0, stream>>>(
      static_cast<const T*>(a.x), a.x_row_stride, static_cast<const T*>(a.w), static_cast<T*>(a.y), a.rstd,
      a.eps, a.offset, a.casting == RmsCasting::kLlama);
  return cudaGetLastError();
}

template <typename T, int COLS>
bool by_variant(const RmsNormFwdArgs& a, FwdFixed v, cudaStream_t stream, cudaError_t* err) {
  constexpr int VEC = 16 / sizeof(T);
  switch (v) {
    case FwdFixed::kT256:
      *err = launch<T, COLS, 256, kSeq>(a, stream);
      return true;
    case FwdFixed::kT512:
      *err = launch<T, COLS, 512, kSeq>(a, stream);
      return true;
    case FwdFixed::kT1024:
      if constexpr (COLS % (1024 * VEC) == 0) {
        *err = launch<T, COLS, 1024, kSeq>(a, stream);
        return true;
      }
      return false;
    case FwdFixed::kR512:
      *err = launch<T, COLS, 512, kRsq>(a, stream);
      return true;
    case FwdFixed::kP512:
      *err = launch<T, COLS, 512, kPre>(a, stream);
      return true;
    case FwdFixed::kN512:
      *err = launch<T, COLS, 512, kNoL1>(a, stream);
      return true;
    default:
      return false;
  }
}

template <typename T>
bool by_cols(const RmsNormFwdArgs& a, FwdFixed v, cudaStream_t stream, cudaError_t* err) {
  switch (a.cols) {
    case 4096:
      return by_variant<T, 4096>(a, v, stream, err);
    case 8192:
      return by_variant<T, 8192>(a, v, stream, err);
    case 16384:
      return by_variant<T, 16384>(a, v, stream, err);
    default:
      return false;
  }
}

}  // namespace

bool rms_norm_fwd_fixed(const RmsNormFwdArgs& a, FwdFixed v, cudaStream_t stream, cudaError_t* err) {
  if (v == FwdFixed::kOff || a.res != nullptr || a.w == nullptr || a.rows > INT32_MAX) return false;
  if (a.w_dtype != a.x_dtype || a.y_dtype != a.x_dtype) return false;
  if (!is_aligned(a.x, 16) || !is_aligned(a.w, 16) || !is_aligned(a.y, 16) || a.x_row_stride % 8 != 0)
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
