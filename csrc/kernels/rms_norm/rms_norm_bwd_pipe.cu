// RMSNorm backward, pipelined (rms_bwd_pipe): rows of up to 1024 16-byte
// vectors, one vector a thread, the next rows fetched while a row is reduced.
// The default below 129 vectors on sm_90 (above, the TMA backward), at every
// width up to 1024 vectors without sm_90 code, and for FusedAddRMSNorm with a
// residual gradient (kPipeAsync). docs/kernels/rms_norm.md.
#include "kernels/norm/norm_plan.h"
#include "kernels/rms_norm/rms_norm_impl.h"
#include "kernels/rms_norm/rms_norm_kernels.cuh"

namespace liger_cpp::kernels {
namespace {

// group_sum with ONE barrier, which only this threadIdx.y group waits on: the
// warp sums go to scratch[ty][parity] and callers alternate parity, so a call
// never overwrites a buffer a slower warp may still read (a thread past this
// call's barrier knows every thread of its group has finished reading the
// buffer used two calls ago). Fixed order, deterministic.
__device__ __forceinline__ float group_sum_1bar(float v, float (*scratch)[2][32], int parity) {
  v = warp_sum(v);
  if (blockDim.x == 32) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* mine = scratch[threadIdx.y][parity];
  if (lane == 0) mine[warp] = v;
  named_barrier(1 + static_cast<int>(threadIdx.y), blockDim.x);
  const float s = lane < static_cast<int>(blockDim.x >> 5) ? mine[lane] : 0.f;
  return warp_sum(s);
}

// Backward, persistent, one row per threadIdx.y group (TX = blockDim.x
// threads, MAXV vectors of VEC columns each), dW partials in registers. Unlike
// rms_bwd_cached, the next rows' x and dy are fetched while the current row
// is reduced, and the group's reduction waits on a named barrier (one per
// row) instead of the whole block (two per row). Two ways to fetch ahead:
//  * STAGES == 0 (kPipeRegs): one row ahead into registers; plain RMSNorm
//    only, with dy no wider than x (fp32 dy with 16-bit x spilled).
//  * STAGES >= 2 (kPipeAsync): STAGES - 1 rows ahead with cp.async into this
//    thread's own slots of shared memory: the bytes in flight cost no
//    registers, and since each thread only reads back what it copied itself,
//    cp.async.wait_group is the only synchronisation needed. With DS, ds_out
//    comes the same way (a third operand a row: one row ahead in registers
//    left too few bytes in flight).
// The weights of the thread's (fixed) columns are loaded once. dy and dx may
// alias (the rows fetched ahead are never the row being written); so may
// ds_out and dx (each element read by its thread before written).
// __launch_bounds__(1024, 1) caps it at 64 registers (measured with -Xptxas
// -v: no spills with MAXV = 1): 32 warps per SM, twice rms_bwd_cached's 16.
template <typename T, typename WT, typename OT, int VEC, int MAXV, int STAGES, bool DS>
__global__ void __launch_bounds__(1024, 1)
    rms_bwd_pipe(const OT* dy, int64_t dy_stride, const T* __restrict__ x, int64_t x_stride,
                 const WT* __restrict__ w, const float* __restrict__ rstd, const T* ds_out,
                 int64_t ds_out_stride, T* dx, int64_t dx_stride, float* __restrict__ partial, int64_t rows,
                 int64_t cols, float offset, bool llama) {
  using XV = Vec<T, VEC>;
  using GV = Vec<OT, VEC>;
  static_assert(sizeof(XV) % 16 == 0 && sizeof(GV) % 16 == 0, "whole 16-byte vectors only");
  static_assert(!DS || STAGES > 0, "ds_out comes with the cp.async stages");
  constexpr int CX = sizeof(XV) / 16, CG = sizeof(GV) / 16, CD = DS ? CX : 0;
  constexpr int NCH = CX + CG + CD;     // 16-byte chunks per vector index and stage
  extern __shared__ uint4 pipe_smem[];  // [STAGES][TY][NCH][MAXV][TX], then reused for dW
  __shared__ float scratch[kMaxNamedGroups][2][32];
  const int tx = threadIdx.x, TX = blockDim.x, ty = threadIdx.y, TY = blockDim.y;
  const int64_t nvec = cols / VEC;
  const int64_t step = static_cast<int64_t>(gridDim.x) * TY;
  const int64_t iters = (rows + step - 1) / step;  // the same for every thread
  const int64_t first = static_cast<int64_t>(blockIdx.x) * TY + ty;

  Vec<WT, VEC> wv[MAXV];
  bool has[MAXV];
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    const int64_t v = static_cast<int64_t>(i) * TX + tx;
    has[i] = v < nvec;
    if (w != nullptr && has[i]) wv[i] = load_vec<WT, VEC>(w + v * VEC);
  }
  auto weight = [&](int i, int j) { return w != nullptr ? to_float<WT>(wv[i].v[j]) + offset : 1.f; };
  float dw_acc[MAXV][VEC];
#pragma unroll
  for (int i = 0; i < MAXV; ++i)
#pragma unroll
    for (int j = 0; j < VEC; ++j) dw_acc[i][j] = 0.f;

  // Shared-memory slot of chunk ch of vector i at a stage (STAGES >= 2).
  auto slot = [&](int stage, int ch, int i) -> uint4* {
    return pipe_smem + ((((stage * TY + ty) * NCH + ch) * MAXV + i) * TX + tx);
  };
  auto fetch_async = [&](int64_t row, int stage) {
    if (row < rows) {
#pragma unroll
      for (int i = 0; i < MAXV; ++i) {
        const int64_t v = static_cast<int64_t>(i) * TX + tx;
        if (has[i]) {
          const char* xs = reinterpret_cast<const char*>(x + row * x_stride + v * VEC);
          const char* gs = reinterpret_cast<const char*>(dy + row * dy_stride + v * VEC);
#pragma unroll
          for (int c = 0; c < CX; ++c) copy_16B_async(slot(stage, c, i), xs + 16 * c);
#pragma unroll
          for (int c = 0; c < CG; ++c) copy_16B_async(slot(stage, CX + c, i), gs + 16 * c);
          if constexpr (DS) {
            const char* ds = reinterpret_cast<const char*>(ds_out + row * ds_out_stride + v * VEC);
#pragma unroll
            for (int c = 0; c < CD; ++c) copy_16B_async(slot(stage, CX + CG + c, i), ds + 16 * c);
          }
        }
      }
    }
    async_commit();  // also when empty: one group per row keeps wait_group's count right
  };
  auto fetch_regs = [&](int64_t row, XV(&xd)[MAXV], GV(&gd)[MAXV]) {
    if (row >= rows) return;
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
      const int64_t v = static_cast<int64_t>(i) * TX + tx;
      if (has[i]) {
        xd[i] = load_vec<T, VEC>(x + row * x_stride + v * VEC);
        gd[i] = load_vec<OT, VEC>(dy + row * dy_stride + v * VEC);
      }
    }
  };

  XV xv[MAXV];
  GV gv[MAXV];
  if constexpr (STAGES == 0) {
    fetch_regs(first, xv, gv);
  } else {
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) fetch_async(first + s * step, s);
  }
  float r_next = first < rows ? rstd[first] : 0.f;  // one row ahead: its latency is hidden too

  for (int64_t it = 0; it < iters; ++it) {
    const int64_t row = it * step + first;
    const bool active = row < rows;
    const float r = r_next;
    r_next = row + step < rows ? rstd[row + step] : 0.f;
    const int stage = STAGES == 0 ? 0 : static_cast<int>(it % (STAGES == 0 ? 1 : STAGES));
    if constexpr (STAGES > 0) {
      // Refill the slots the previous row used (this thread is done with them).
      fetch_async(row + (STAGES - 1) * step, (stage + STAGES - 1) % STAGES);
      async_wait<STAGES - 1>();  // this row's copies have landed
      if (active) {
#pragma unroll
        for (int i = 0; i < MAXV; ++i)
          if (has[i]) {
#pragma unroll
            for (int c = 0; c < CX; ++c) reinterpret_cast<uint4*>(&xv[i])[c] = *slot(stage, c, i);
#pragma unroll
            for (int c = 0; c < CG; ++c) reinterpret_cast<uint4*>(&gv[i])[c] = *slot(stage, CX + c, i);
          }
      }
    }
    float dot = 0.f;
    if (active) {
#pragma unroll
      for (int i = 0; i < MAXV; ++i)
        if (has[i])
#pragma unroll
          for (int j = 0; j < VEC; ++j)
            dot += to_float<OT>(gv[i].v[j]) * weight(i, j) * to_float<T>(xv[i].v[j]);
    }
    // Keep x, dy and w packed past the reduction (VEC / 2 words each for
    // 16-bit types) instead of the floats converted above, which spilled.
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
      opaque_words(xv[i]);
      opaque_words(gv[i]);
      opaque_words(wv[i]);
    }
    XV xn[STAGES == 0 ? MAXV : 1];
    GV gn[STAGES == 0 ? MAXV : 1];
    if constexpr (STAGES == 0) fetch_regs(row + step, xn, gn);  // in flight during the barrier
    dot = group_sum_1bar(dot, scratch, static_cast<int>(it & 1));
    if (active) {
      const float c = r * r * r * dot / static_cast<float>(cols);
#pragma unroll
      for (int i = 0; i < MAXV; ++i) {
        const int64_t v = static_cast<int64_t>(i) * TX + tx;
        if (has[i]) {
          float d[VEC];
          if constexpr (DS) {
            XV dv;
#pragma unroll
            for (int k = 0; k < CD; ++k) reinterpret_cast<uint4*>(&dv)[k] = *slot(stage, CX + CG + k, i);
#pragma unroll
            for (int j = 0; j < VEC; ++j) d[j] = to_float<T>(dv.v[j]);
          }
          Vec<T, VEC> out;
#pragma unroll
          for (int j = 0; j < VEC; ++j) {
            const float xf = to_float<T>(xv[i].v[j]);
            const float g = to_float<OT>(gv[i].v[j]);
            float o = r * g * weight(i, j) - c * xf;
            if constexpr (DS) o += d[j];
            out.v[j] = from_float<T>(o);
            dw_acc[i][j] += g * normed<T>(xf, r, llama);
          }
          store_vec<T, VEC>(dx + row * dx_stride + v * VEC, out);
        }
      }
    }
    if constexpr (STAGES == 0) {
#pragma unroll
      for (int i = 0; i < MAXV; ++i) {
        xv[i] = xn[i];
        gv[i] = gn[i];
      }
    }
  }
  if (partial == nullptr) return;
  float* out = partial + static_cast<int64_t>(blockIdx.x) * cols;
  if (TY == 1) {  // one group: straight from registers, VEC floats per store
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
      const int64_t v = static_cast<int64_t>(i) * TX + tx;
      if (has[i]) {
        Vec<float, VEC> o;
#pragma unroll
        for (int j = 0; j < VEC; ++j) o.v[j] = dw_acc[i][j];
        store_vec<float, VEC>(out + v * VEC, o);
      }
    }
    return;
  }
  // The groups summed in a fixed order in shared memory, laid out [i][j][tx]
  // (conflict-free), reusing the pipeline's buffers (all copies were waited for).
  float* dw_smem = reinterpret_cast<float*>(pipe_smem);
  async_wait<0>();
  __syncthreads();
  for (int g = 0; g < TY; ++g) {
    if (ty == g) {
#pragma unroll
      for (int i = 0; i < MAXV; ++i)
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const int idx = (i * VEC + j) * TX + tx;
          dw_smem[idx] = (g == 0 ? 0.f : dw_smem[idx]) + dw_acc[i][j];
        }
    }
    __syncthreads();
  }
  if (ty != 0) return;
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    const int64_t v = static_cast<int64_t>(i) * TX + tx;
    if (has[i]) {
      Vec<float, VEC> o;
#pragma unroll
      for (int j = 0; j < VEC; ++j) o.v[j] = dw_smem[(i * VEC + j) * TX + tx];
      store_vec<float, VEC>(out + v * VEC, o);
    }
  }
}

// The build for (async, ds), or nullptr where there is none: cp.async
// (kPipeAsync) with a residual gradient and for dy wider than x (fp32 dy with
// 16-bit x spilled in registers), registers (kPipeRegs) otherwise.
template <typename T, typename WT, typename OT>
using PipeKernel = void (*)(const OT*, int64_t, const T*, int64_t, const WT*, const float*, const T*, int64_t,
                            T*, int64_t, float*, int64_t, int64_t, float, bool);
template <typename T, typename WT, typename OT>
PipeKernel<T, WT, OT> pipe_kernel(bool async, bool ds) {
  constexpr int full = 16 / sizeof(T);
  constexpr int S = rms_norm_impl::kPipeStages;
  constexpr bool kWideDy = sizeof(OT) > sizeof(T);
  if (async != (ds || kWideDy)) return nullptr;
  if (ds) return &rms_bwd_pipe<T, WT, OT, full, 1, S, true>;
  if constexpr (kWideDy) {
    return &rms_bwd_pipe<T, WT, OT, full, 1, S, false>;
  } else {
    return &rms_bwd_pipe<T, WT, OT, full, 1, 0, false>;
  }
}

}  // namespace

namespace rms_norm_impl {

const void* bwd_pipe_kernel(DType x, DType w, DType y, bool async, bool ds) {
  return dispatch_types(x, w, y, static_cast<const void*>(nullptr), [&](auto xt, auto wt, auto yt) {
    return reinterpret_cast<const void*>(pipe_kernel<decltype(xt), decltype(wt), decltype(yt)>(async, ds));
  });
}

cudaError_t launch_bwd_pipe(const RmsNormBwdArgs& a, const RmsNormBwdPlan& p, float* partial,
                            cudaStream_t stream) {
  const bool llama = a.casting == RmsCasting::kLlama;
  return dispatch_types(
      a.x_dtype, a.w ? a.w_dtype : a.x_dtype, a.y_dtype, cudaErrorInvalidValue,
      [&](auto xt, auto wt, auto yt) {
        using T = decltype(xt);
        using WT = decltype(wt);
        using OT = decltype(yt);
        auto* kern = pipe_kernel<T, WT, OT>(p.kernel == RmsBwdKernel::kPipeAsync, a.ds_out != nullptr);
        if (kern == nullptr) return cudaErrorInvalidValue;
        const dim3 block(static_cast<unsigned>(p.threads), static_cast<unsigned>(p.rows_per_block));
        kern<<<static_cast<unsigned>(p.grid), block, p.smem, stream>>>(
            static_cast<const OT*>(a.dy), a.dy_row_stride, static_cast<const T*>(a.x), a.x_row_stride,
            static_cast<const WT*>(a.w), a.rstd, static_cast<const T*>(a.ds_out), a.ds_out_row_stride,
            static_cast<T*>(a.dx), a.dx_row_stride, partial, a.rows, a.cols, a.offset, llama);
        return cudaGetLastError();
      });
}

}  // namespace rms_norm_impl
}  // namespace liger_cpp::kernels
