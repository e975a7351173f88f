// RMSNorm forward entry point (rms_norm_fwd: the plan's kernel launched) and
// the register-cached forward, rms_fwd_cached: the default where neither the
// fixed-width forward (rms_norm_fwd_fixed.cu) nor the wide-row forward
// (rms_norm_fwd_l2hint.cu) runs, FusedAddRMSNorm's forward included. Which
// kernel runs where, and the measurements behind it: docs/kernels/rms_norm.md.
#include "kernels/norm/norm_plan.h"
#include "kernels/rms_norm/rms_norm_impl.h"
#include "kernels/rms_norm/rms_norm_kernels.cuh"

namespace liger_cpp::kernels {
namespace {

using rms_norm_impl::kFwdRegCap;

// Forward, a row cached in registers: a group of TX threads (threadIdx.y
// selects the group) owns one row and keeps it in registers as up to MAXV
// aligned vectors per thread, so each row is read from device memory once.
// ADD (FusedAddRMSNorm): the row normalised is s = x + res, rounded to T and
// written to s (contiguous); otherwise res and s are unused. With ADD, s and y
// are built as packed 32-bit words and stored as whole 16-byte st.global.v4
// (PACK, see store_16B_words: nvcc split the struct stores of this instance
// into 2-byte stores), and the row's weights, where they have x's width (fp32
// weights with 16-bit x would take twice the registers), are loaded (all MAXV
// vectors at once) before the reduction (PREW), so their latency hides behind
// the barrier instead of following it once per vector. Plain RMSNorm stores
// structs and loads its weights after the reduction (docs/kernels/rms_norm.md:
// the packed stores and early weights measured no faster there).
// MAXV = 2: at most 32 registers, so two 1024-thread blocks (a whole SM's
// threads) can be resident.
// REGCAP (kFwdRegCap or 0): blocks of at most 512 threads and at most that
// many registers (52 uncapped at MAXV = 4), so that more rows share an SM: at
// bf16 hidden 16K three 512-thread rows instead of two.
// (The inner guard: nvcc evaluates the division in the attribute even where
// REGCAP is 0 and the branch is not taken.)
template <typename T, typename WT, typename OT, int VEC, int MAXV, bool ADD, int REGCAP = 0>
__global__ void __launch_bounds__(REGCAP ? 512 : 1024,
                                  REGCAP ? 65536 / (512 * (REGCAP ? REGCAP : 1)) : (MAXV <= 2 ? 2 : 1))
    rms_fwd_cached(const T* __restrict__ x, int64_t x_stride, const T* __restrict__ res, int64_t res_stride,
                   T* __restrict__ s, const WT* __restrict__ w, OT* __restrict__ y, float* __restrict__ rstd,
                   int64_t rows, int64_t cols, float eps, float offset, bool llama) {
  constexpr bool PACK = ADD;
  constexpr bool PREW = ADD && sizeof(WT) == sizeof(T);
  // The next PDL-launched kernel (the backward, when it follows at once) may
  // start its blocks once this grid's last wave has started: they fill SMs
  // this grid's tail leaves idle and wait there for its end (pdl_wait).
  pdl_trigger();
  __shared__ float scratch[kGroupScratch];
  const int tx = threadIdx.x, TX = blockDim.x;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = row < rows;
  const int64_t nvec = cols / VEC;
  const T* xr = x + row * x_stride;

  // All loads first, then the arithmetic: the MAXV loads are then in flight
  // together instead of each waiting for the previous one's use. With ADD the
  // residual's loads are issued in the same pass.
  Vec<T, VEC> xv[MAXV];
  Vec<T, VEC> rv[ADD ? MAXV : 1];
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    const int64_t v = static_cast<int64_t>(i) * TX + tx;
    if (active && v < nvec) {
      load_16B_volatile(xv[i], xr + v * VEC);
      if constexpr (ADD) load_16B_volatile(rv[i], res + row * res_stride + v * VEC);
    }
  }
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    const int64_t v = static_cast<int64_t>(i) * TX + tx;
    if (active && v < nvec) {
      if constexpr (ADD) {
        float f[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) f[j] = to_float<T>(xv[i].v[j]) + to_float<T>(rv[i].v[j]);
        xv[i] = pack_vec<T, VEC>(f);
        store_16B_words(s + row * cols + v * VEC, xv[i]);
      }
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float f = to_float<T>(xv[i].v[j]);
        ss += f * f;
      }
    }
  }
  // PREW: this thread's weights, requested before the barrier (res's
  // registers are free by now). Volatile so nvcc does not sink them past it.
  Vec<WT, VEC> wv[PREW ? MAXV : 1];
  if constexpr (PREW) {
    if (w != nullptr && active) {
#pragma unroll
      for (int i = 0; i < MAXV; ++i) {
        const int64_t v = static_cast<int64_t>(i) * TX + tx;
        if (v < nvec) load_words_volatile(wv[i], w + v * VEC);
      }
    }
  }
  ss = group_sum</*FIRST_USE=*/true>(ss, scratch);
  if (!active) return;
  const float r = 1.f / sqrtf(ss / static_cast<float>(cols) + eps);
  if (tx == 0) rstd[row] = r;
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    opaque_16B(xv[i]);
    if constexpr (PREW) opaque_16B(wv[i]);  // kept packed, not as VEC floats
  }
  OT* yr = y + row * cols;
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    const int64_t v = static_cast<int64_t>(i) * TX + tx;
    if (v < nvec) {
      float wf[VEC];
      if constexpr (PREW) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) wf[j] = w != nullptr ? to_float<WT>(wv[i].v[j]) + offset : 1.f;
      } else {
        load_weight<WT, VEC>(w, v * VEC, offset, wf);
      }
      if constexpr (PACK) {
        float o[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) o[j] = normed<T>(to_float<T>(xv[i].v[j]), r, llama) * wf[j];
        store_16B_words(yr + v * VEC, pack_vec<OT, VEC>(o));
      } else {
        Vec<OT, VEC> out;
#pragma unroll
        for (int j = 0; j < VEC; ++j)
          out.v[j] = from_float<OT>(normed<T>(to_float<T>(xv[i].v[j]), r, llama) * wf[j]);
        store_vec<OT, VEC>(yr + v * VEC, out);
      }
    }
  }
}

}  // namespace

namespace rms_norm_impl {

cudaError_t launch_fwd_cached(const RmsNormFwdArgs& a, const RmsNormFwdPlan& p, cudaStream_t stream) {
  const bool llama = a.casting == RmsCasting::kLlama;
  return dispatch_types(a.x_dtype, a.w ? a.w_dtype : a.x_dtype, a.y_dtype, cudaErrorInvalidValue,
                        [&](auto xt, auto wt, auto yt) {
                          using T = decltype(xt);
                          using WT = decltype(wt);
                          using OT = decltype(yt);
                          constexpr int full = 16 / sizeof(T);
                          const dim3 block(static_cast<unsigned>(p.threads),
                                           static_cast<unsigned>(p.rows_per_block));
                          auto run = [&](auto* kern) {
                            kern<<<static_cast<unsigned>(p.grid), block, 0, stream>>>(
                                static_cast<const T*>(a.x), a.x_row_stride, static_cast<const T*>(a.res),
                                a.res_row_stride, static_cast<T*>(a.s), static_cast<const WT*>(a.w),
                                static_cast<OT*>(a.y), a.rstd, a.rows, a.cols, a.eps, a.offset, llama);
                            return cudaGetLastError();
                          };
                          if (a.res != nullptr) return run(&rms_fwd_cached<T, WT, OT, full, kMaxV, true>);
                          if (p.vectors_per_thread == 2)
                            return run(&rms_fwd_cached<T, WT, OT, full, 2, false>);
                          // The capped build only where y has x's width (it spills otherwise; the plan
                          // knows).
                          if constexpr (sizeof(OT) == sizeof(T)) {
                            if (p.reg_capped)
                              return run(&rms_fwd_cached<T, WT, OT, full, kMaxV, false, kFwdRegCap>);
                          }
                          return run(&rms_fwd_cached<T, WT, OT, full, kMaxV, false>);
                        });
}

}  // namespace rms_norm_impl

cudaError_t rms_norm_fwd(const RmsNormFwdArgs& a, const RmsNormFwdPlan& p, cudaStream_t stream) {
  switch (p.kernel) {
    case RmsFwdKernel::kFixed:
    case RmsFwdKernel::kFixedRt:
      return rms_norm_impl::launch_fwd_fixed(a, p, stream);
    case RmsFwdKernel::kCached:
      return rms_norm_impl::launch_fwd_cached(a, p, stream);
    case RmsFwdKernel::kL2Hint:
      return rms_norm_impl::launch_fwd_l2hint(a, p, stream);
    case RmsFwdKernel::kGeneric:
      return rms_norm_impl::launch_fwd_generic(a, p, stream);
    case RmsFwdKernel::kNone:
      break;
  }
  return a.rows == 0 ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace liger_cpp::kernels
