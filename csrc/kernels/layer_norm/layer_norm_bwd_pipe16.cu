// LayerNorm backward with 16-byte vectors and cp.async stages (ln_bwd_pipe16):
// the default backward for rows of up to 512 16-byte vectors without sm_90
// code (with it, the TMA backward), and where the TMA backward's shared memory
// does not fit. docs/kernels/layer_norm.md.
#include "kernels/layer_norm/layer_norm_impl.h"
#include "kernels/layer_norm/layer_norm_kernels.cuh"

namespace liger_cpp::kernels {
namespace {

using layer_norm_impl::kPipe16Block;
using layer_norm_impl::kPipe16Stages;

// group_sum_1bar (rms_norm_bwd_pipe.cu) for two sums at once: sum(g) and sum(g * xhat)
// share the row's ONE named barrier, which only this threadIdx.y group waits
// on. The callers alternate parity (see group_sum_1bar for why that makes one
// barrier enough). Every lane gets the same fixed-order sums: deterministic.
__device__ __forceinline__ float2 group_sum2_1bar(float a, float b, float2 (*scratch)[2][32], int parity) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  if (blockDim.x == 32) return make_float2(a, b);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float2* mine = scratch[threadIdx.y][parity];
  if (lane == 0) mine[warp] = make_float2(a, b);
  named_barrier(1 + static_cast<int>(threadIdx.y), blockDim.x);
  const float2 u = lane < static_cast<int>(blockDim.x >> 5) ? mine[lane] : make_float2(0.f, 0.f);
  a = u.x;
  b = u.y;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  return make_float2(a, b);
}

// Backward with whole 16-byte vectors: rms_bwd_pipe's structure with
// LayerNorm's two sums. Persistent blocks of BLOCK = 512 threads (two a SM at
// 64 registers), one row per threadIdx.y group of TX = blockDim.x threads,
// ONE 16-byte vector per thread (VEC = 16 / sizeof(T) columns; so rows up to
// BLOCK vectors), one named barrier per row that only the row's group waits on
// (group_sum2_1bar). x and dy come STAGES - 1 rows ahead (STAGES =
// kPipe16Stages: the one build) with cp.async into this thread's own
// shared-memory slots: the bytes in flight cost no registers
// (the 2 x VEC fp32 dW/dB accumulators take 16 for 16-bit types), and since
// each thread reads back only what it copied, cp.async.wait_group is the only
// synchronisation they need. (The next row in registers instead measured
// slower: docs/kernels/layer_norm.md.)
// mean and rstd come the same way, AHEAD rows ahead: each thread copies them
// with cp.async into its own slots. Held in
// registers one row ahead they were spilled at 64 registers (stored to local
// memory right after the load, which then waited for it every row).
// Weights wider than x (fp32 with 16-bit x: 8 registers) are kept in this
// thread's own shared-memory slots and read again for each use (spilled in
// registers); otherwise as packed words in registers.
// x, dy and the weights stay packed as 32-bit words across the barrier
// (opaque_words), converted again after it, so nvcc keeps 4 registers per
// vector instead of VEC floats. dx is built as packed words, stored as one
// st.global.v4 (store_16B_words).
template <typename T, typename WT, int STAGES>
__global__ void __launch_bounds__(kPipe16Block, 2)
    ln_bwd_pipe16(const T* __restrict__ dy, int64_t dy_stride, const T* __restrict__ x, int64_t x_stride,
                  const WT* __restrict__ w, const float* __restrict__ mean, const float* __restrict__ rstd,
                  T* __restrict__ dx, float* __restrict__ pw, float* __restrict__ pb, int64_t rows,
                  int64_t cols) {
  constexpr int VEC = 16 / static_cast<int>(sizeof(T));
  constexpr int WW = VEC * static_cast<int>(sizeof(WT)) / 4;  // 32-bit words of VEC weights
  constexpr int AHEAD = STAGES - 1;                           // rows fetched ahead
  constexpr int NS = AHEAD + 1;                               // slots per thread (mean, rstd)
  // [STAGES][TY][2 (x, dy)][TX] 16-byte slots, then [NS][TY][2 (mean, rstd)][TX]
  // floats; after the rows, [VEC][TX] floats to sum the row groups' partials
  // (at most the size of the latter), then [TY][2][TX] 16-byte weight slots (WS).
  constexpr bool WS = sizeof(WT) > sizeof(T);
  extern __shared__ uint4 pipe_smem[];
  __shared__ float2 scratch[kMaxNamedGroups][2][32];
  const int tx = threadIdx.x, TX = blockDim.x, ty = threadIdx.y, TY = blockDim.y;
  const int64_t nvec = cols / VEC;
  const bool has = tx < nvec;
  const int64_t step = static_cast<int64_t>(gridDim.x) * TY;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * TY + ty;
  const float inv_n = 1.f / static_cast<float>(cols);
  const int c0 = tx * VEC;  // this thread's first column

  auto slot = [&](int stage, int ch) -> uint4* { return pipe_smem + ((stage * TY + ty) * 2 + ch) * TX + tx; };
  float* const mr_smem = reinterpret_cast<float*>(pipe_smem + STAGES * TY * 2 * TX);
  auto mr_slot = [&](int stage, int k) -> float* { return mr_smem + ((stage * TY + ty) * 2 + k) * TX + tx; };
  uint4* const w_smem = reinterpret_cast<uint4*>(mr_smem + NS * TY * 2 * TX) + ty * 2 * TX + tx;

  // Loaded once: the thread's columns are the same in every row.
  uint32_t wv[WS ? 1 : WW];
  if (has && w != nullptr) {
    if constexpr (WS) {
      static_assert(WW == 8, "fp32 weights with 16-bit x");
      uint32_t t[8];
      load_words_volatile(t, w + c0);
      w_smem[0] = make_uint4(t[0], t[1], t[2], t[3]);
      w_smem[TX] = make_uint4(t[4], t[5], t[6], t[7]);
    } else if constexpr (WW == 2) {  // fp32 x, 16-bit weights: 8 bytes
      load_words<2>(wv, w + c0);
    } else {
      load_words_volatile(wv, w + c0);
    }
  }
  // This thread's VEC weights as floats (all ones without a weight).
  auto weights = [&](float(&wl)[VEC]) {
    if (w == nullptr) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) wl[j] = 1.f;
    } else if constexpr (WS) {
      const uint4 a = w_smem[0], b = w_smem[TX];
      const uint32_t t[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int j = 0; j < VEC; ++j) wl[j] = __uint_as_float(t[j]);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) wl[j] = word_elem<WT>(wv, j);
    }
  };
  float dw_acc[VEC], db_acc[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) dw_acc[j] = db_acc[j] = 0.f;

  auto fetch_async = [&](int64_t row, int stage) {
    if (has && row < rows) {
      copy_16B_async(slot(stage, 0), x + row * x_stride + c0);
      copy_16B_async(slot(stage, 1), dy + row * dy_stride + c0);
      copy_4B_async(mr_slot(stage, 0), mean + row);
      copy_4B_async(mr_slot(stage, 1), rstd + row);
    }
    async_commit();  // also when empty: one group per row keeps wait_group's count right
  };
  uint32_t xv[4], gv[4];
#pragma unroll
  for (int s = 0; s < AHEAD; ++s) fetch_async(first + s * step, s);

  // The loop runs on the block's first row (`base`), so every thread of the
  // block takes the same number of iterations (the barriers need that).
  int stage = 0, parity = 0;
  for (int64_t base = first - ty; base < rows; base += step) {
    const int64_t row = base + ty;
    const bool active = row < rows;
    // Refill the slots the previous row used (this thread is done with them).
    fetch_async(row + AHEAD * step, stage == 0 ? NS - 1 : stage - 1);
    async_wait<AHEAD>();  // this row's copies have landed
    float m = 0.f, r = 0.f;
    if (active && has) {
      m = *mr_slot(stage, 0);
      r = *mr_slot(stage, 1);
      const uint4 a = *slot(stage, 0), b = *slot(stage, 1);
      xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w;
      gv[0] = b.x, gv[1] = b.y, gv[2] = b.z, gv[3] = b.w;
    }
    float sg = 0.f, sgx = 0.f;
    if (active && has) {
      float wl[VEC];
      weights(wl);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float g = word_elem<T>(gv, j) * wl[j];
        sg += g;
        sgx += g * ((word_elem<T>(xv, j) - m) * r);
      }
    }
    // Converted again below rather than kept as floats across the barrier (spilled).
    opaque_words<4>(xv);
    opaque_words<4>(gv);
    if constexpr (!WS) opaque_words<WW>(wv);
    const float2 sums = group_sum2_1bar(sg, sgx, scratch, parity);
    parity ^= 1;
    if (active && has) {
      const float a = sums.x * inv_n, bq = sums.y * inv_n;
      float wl[VEC], o[VEC];
      weights(wl);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float xh = (word_elem<T>(xv, j) - m) * r;
        const float d = word_elem<T>(gv, j);
        o[j] = r * (d * wl[j] - a - xh * bq);
        dw_acc[j] += d * xh;
        db_acc[j] += d;
      }
      store_16B_words(dx + row * cols + c0, pack_vec<T, VEC>(o));
    }
    stage = stage + 1 == NS ? 0 : stage + 1;
  }

  // Each block writes one partial row of dW and of dB: straight from registers
  // with one row group, else the groups summed in a fixed order in shared
  // memory laid out [j][tx] (conflict-free), reusing the pipeline's slots.
  if (pw == nullptr && pb == nullptr) return;  // uniform across the block
  float* smem = reinterpret_cast<float*>(pipe_smem);
  if (TY > 1) {
    async_wait<0>();  // the trailing copies (of rows past the end: none) before reusing the slots
    __syncthreads();
  }
  for (int pass = 0; pass < 2; ++pass) {
    float* part = pass == 0 ? pw : pb;
    if (part == nullptr) continue;  // uniform across the block
    float* out = part + static_cast<int64_t>(blockIdx.x) * cols;
    if (TY == 1) {
      if (has) {
        Vec<float, VEC> v;
#pragma unroll
        for (int j = 0; j < VEC; ++j) v.v[j] = pass == 0 ? dw_acc[j] : db_acc[j];
        store_vec<float, VEC>(out + c0, v);
      }
      continue;
    }
    for (int g = 0; g < TY; ++g) {
      if (ty == g) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float add = pass == 0 ? dw_acc[j] : db_acc[j];
          smem[j * TX + tx] = (g == 0 ? 0.f : smem[j * TX + tx]) + add;
        }
      }
      __syncthreads();
    }
    if (ty == 0 && has) {
      Vec<float, VEC> v;
#pragma unroll
      for (int j = 0; j < VEC; ++j) v.v[j] = smem[j * TX + tx];
      store_vec<float, VEC>(out + c0, v);
    }
    __syncthreads();  // before the next pass rewrites smem
  }
}

}  // namespace

namespace layer_norm_impl {

const void* bwd_pipe16_kernel(DType x, DType w) {
  return dispatch_ln_types(x, w, static_cast<const void*>(nullptr), [&](auto xt, auto wt) {
    return reinterpret_cast<const void*>(&ln_bwd_pipe16<decltype(xt), decltype(wt), kPipe16Stages>);
  });
}

cudaError_t launch_bwd_pipe16(const LayerNormBwdArgs& a, const LayerNormBwdPlan& p, float* pw, float* pb,
                              cudaStream_t stream) {
  return dispatch_ln_types(a.x_dtype, a.w_dtype, cudaErrorInvalidValue, [&](auto xt, auto wt) {
    using T = decltype(xt);
    using WT = decltype(wt);
    ln_bwd_pipe16<T, WT, kPipe16Stages>
        <<<static_cast<unsigned>(p.grid),
           dim3(static_cast<unsigned>(p.threads), static_cast<unsigned>(p.rows_per_block)), p.smem, stream>>>(
            static_cast<const T*>(a.dy), a.dy_row_stride, static_cast<const T*>(a.x), a.x_row_stride,
            static_cast<const WT*>(a.w), a.mean, a.rstd, static_cast<T*>(a.dx), pw, pb, a.rows, a.cols);
    return cudaGetLastError();
  });
}

}  // namespace layer_norm_impl
}  // namespace liger_cpp::kernels
