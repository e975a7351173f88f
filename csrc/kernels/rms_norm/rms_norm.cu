// RMSNorm forward and backward kernels (see rms_norm.h for the math).
//
// Two families:
//  * "cached": a group of TX threads (threadIdx.y selects the group) owns one
//    row and keeps it in registers as up to MAXV aligned vectors per thread, so
//    each row is read from device memory once. The backward kernel is
//    persistent: each thread also keeps its columns' dW partial sums in fp32
//    registers across all the rows its group visits; the groups of a block are
//    then summed through shared memory and each block writes one partial row.
//  * "generic": any width and alignment; a block per row that reads the row
//    twice (the second read mostly hits L2), and a column-tiled dW kernel.
//  * rms_fwd_cluster / rms_bwd_cluster (sm_90): the forward and backward of
//    rows above 1024 vectors, one vector a thread, each row split over a
//    thread-block cluster whose blocks exchange their partial sums through
//    distributed shared memory.
//  * rms_bwd_tma (sm_90; the default backward for rows of 129..1024 vectors):
//    x and dy rows brought into shared memory by TMA bulk copies, several rows
//    in flight per persistent block, one vector a thread (two rows a stage
//    for rows of 513..768 threads).
// dW partials are finished by a fixed-order reduction kernel: deterministic,
// no atomics.
// FusedAddRMSNorm runs through the same kernels: a compile-time ADD flag adds
// the residual in the forward (reads x and res, writes s = x + res and y), a
// DS flag adds the gradient reaching s directly (ds_out) in the backward, so
// plain RMSNorm's instantiations are unchanged.
#include <algorithm>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "kernels/common/cluster.cuh"
#include "kernels/common/env_knob.h"
#include "kernels/norm/norm_common.cuh"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rms_norm/rms_norm_fwd_fixed.h"

namespace liger_cpp::kernels {
namespace {

template <typename T, typename WT, typename OT>
constexpr bool valid_types() {
  constexpr bool w_ok = std::is_same_v<WT, T> || std::is_same_v<WT, float> || std::is_same_v<T, float>;
  constexpr bool o_ok = std::is_same_v<OT, T> || std::is_same_v<OT, float>;
  return w_ok && o_ok;
}

// The backwards' weights in shared memory as floats, converted once: this
// thread's VEC weights (+ offset) as VEC / 4 float4s at slot[0], slot[stride],
// ..., read back by the same thread with load_weight_floats (no barrier). w
// points at the thread's first column.
template <typename WT, int VEC>
__device__ __forceinline__ void store_weight_floats(float4* slot, int stride, const WT* w, float offset) {
  static_assert(VEC % 4 == 0, "whole float4s of weights");
  const Vec<WT, VEC> t = load_vec<WT, VEC>(w);
#pragma unroll
  for (int q = 0; q < VEC / 4; ++q)
    slot[q * stride] =
        make_float4(to_float<WT>(t.v[4 * q]) + offset, to_float<WT>(t.v[4 * q + 1]) + offset,
                    to_float<WT>(t.v[4 * q + 2]) + offset, to_float<WT>(t.v[4 * q + 3]) + offset);
}
// No weight: ones (without the offset, as load_weight) in the same slots.
template <int VEC>
__device__ __forceinline__ void store_weight_ones(float4* slot, int stride) {
#pragma unroll
  for (int q = 0; q < VEC / 4; ++q) slot[q * stride] = make_float4(1.f, 1.f, 1.f, 1.f);
}
// stored: false reads ones without touching slot (the caller stored nothing).
template <int VEC>
__device__ __forceinline__ void load_weight_floats(const float4* slot, int stride, bool stored,
                                                   float (&wf)[VEC]) {
#pragma unroll
  for (int q = 0; q < VEC / 4; ++q) {
    const float4 t = stored ? slot[q * stride] : make_float4(1.f, 1.f, 1.f, 1.f);
    wf[4 * q] = t.x;
    wf[4 * q + 1] = t.y;
    wf[4 * q + 2] = t.z;
    wf[4 * q + 3] = t.w;
  }
}

// xv <- round_to_T(xv + rv), also stored at s (FusedAddRMSNorm's residual sum).
template <typename T, int VEC>
__device__ __forceinline__ void add_residual(Vec<T, VEC>& xv, const Vec<T, VEC>& rv, T* s) {
#pragma unroll
  for (int j = 0; j < VEC; ++j) xv.v[j] = from_float<T>(to_float<T>(xv.v[j]) + to_float<T>(rv.v[j]));
  store_vec<T, VEC>(s, xv);
}

// d[j] += ds_out[j] (the gradient reaching s from the residual path), when given.
template <typename T, int VEC>
__device__ __forceinline__ void add_ds_out(float (&d)[VEC], const T* ds_out) {
  if (ds_out == nullptr) return;
  const Vec<T, VEC> v = load_vec<T, VEC>(ds_out);
#pragma unroll
  for (int j = 0; j < VEC; ++j) d[j] += to_float<T>(v.v[j]);
}

// ---------------------------------------------------------------------------
// Forward, row cached in registers.
// ADD (FusedAddRMSNorm): the row normalised is s = x + res, rounded to T and
// written to s (contiguous); otherwise res and s are unused.
// MODE selects the variant (A/B-measurable, see fwd_mode()); all three compute
// the same values:
//  * kFwdOld: struct stores (store_vec), weights loaded one vector at a time
//    after the reduction.
//  * kFwdPack: s and y built as packed 32-bit words and stored as whole
//    16-byte st.global.v4 (see store_16B_words).
//  * kFwdNew: kFwdPack, plus the row's weights loaded (all MAXV vectors at
//    once) before the reduction, when they have x's width (fp32 weights with
//    16-bit x would take twice the registers), so
//    their latency hides behind the barrier instead of following it once per
//    vector.
enum FwdMode : int { kFwdOld = 0, kFwdPack = 1, kFwdNew = 2 };

// MAXV = 2 (LIGER_CPP_RMS_FWD_V): at most 32 registers, so two 1024-thread
// blocks (a whole SM's threads) can be resident.
// REGCAP (kFwdRegCap or 0; LIGER_CPP_RMS_FWD_REGS, see fwd_reg_capped): blocks of at
// most 512 threads and at most that many registers (52 uncapped at MAXV = 4),
// so that more rows share an SM: at bf16 hidden 16K three 512-thread rows
// instead of two.
// (The inner guard: nvcc evaluates the division in the attribute even where
// REGCAP is 0 and the branch is not taken.)
constexpr int kFwdRegCap = 40;
template <typename T, typename WT, typename OT, int VEC, int MAXV, bool ADD, int MODE, int REGCAP = 0>
__global__ void __launch_bounds__(REGCAP ? 512 : 1024,
                                  REGCAP ? 65536 / (512 * (REGCAP ? REGCAP : 1)) : (MAXV <= 2 ? 2 : 1))
    rms_fwd_cached(const T* __restrict__ x, int64_t x_stride, const T* __restrict__ res, int64_t res_stride,
                   T* __restrict__ s, const WT* __restrict__ w, OT* __restrict__ y, float* __restrict__ rstd,
                   int64_t rows, int64_t cols, float eps, float offset, bool llama) {
  constexpr bool PACK = MODE != kFwdOld;
  constexpr bool PREW = MODE == kFwdNew && sizeof(WT) == sizeof(T);
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
      if constexpr (ADD && PACK) {
        float f[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) f[j] = to_float<T>(xv[i].v[j]) + to_float<T>(rv[i].v[j]);
        xv[i] = pack_vec<T, VEC>(f);
        store_16B_words(s + row * cols + v * VEC, xv[i]);
      } else if constexpr (ADD) {
        add_residual<T, VEC>(xv[i], rv[i], s + row * cols + v * VEC);
      }
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float f = to_float<T>(xv[i].v[j]);
        ss += f * f;
      }
    }
  }
  // kFwdNew: this thread's weights, requested before the barrier (res's
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

// Forward for any width: one block per row. The row is stashed in shared
// memory on the first pass when it fits (STASH), else read again (from L2).
// ADD: as in rms_fwd_cached; without STASH the second pass reads s back.
template <typename T, typename WT, typename OT, int VEC, bool STASH, bool ADD>
__global__ void __launch_bounds__(1024)
    rms_fwd_generic(const T* __restrict__ x, int64_t x_stride, const T* __restrict__ res, int64_t res_stride,
                    T* s, const WT* __restrict__ w, OT* __restrict__ y, float* __restrict__ rstd,
                    int64_t cols, float eps, float offset, bool llama) {
  extern __shared__ __align__(16) unsigned char stash_raw[];
  Vec<T, VEC>* stash = reinterpret_cast<Vec<T, VEC>*>(stash_raw);
  __shared__ float scratch[kGroupScratch];
  const int64_t row = blockIdx.x;
  const int64_t nvec = cols / VEC;
  const T* xr = x + row * x_stride;
  float ss = 0.f;
#pragma unroll 4
  for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    Vec<T, VEC> xv = load_vec<T, VEC>(xr + v * VEC);
    if constexpr (ADD) {
      const Vec<T, VEC> rv = load_vec<T, VEC>(res + row * res_stride + v * VEC);
      add_residual<T, VEC>(xv, rv, s + row * cols + v * VEC);
    }
    if constexpr (STASH) stash[v] = xv;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float f = to_float<T>(xv.v[j]);
      ss += f * f;
    }
  }
  ss = group_sum</*FIRST_USE=*/true>(ss, scratch);  // its barrier also publishes the stash
  const float r = 1.f / sqrtf(ss / static_cast<float>(cols) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  OT* yr = y + row * cols;
#pragma unroll 4
  for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    Vec<T, VEC> xv;
    if constexpr (STASH) {
      xv = stash[v];
    } else if constexpr (ADD) {
      xv = load_vec<T, VEC>(s + row * cols + v * VEC);  // written by this thread above
    } else {
      xv = load_vec<T, VEC>(xr + v * VEC);
    }
    float wf[VEC];
    load_weight<WT, VEC>(w, v * VEC, offset, wf);
    Vec<OT, VEC> out;
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      out.v[j] = from_float<OT>(normed<T>(to_float<T>(xv.v[j]), r, llama) * wf[j]);
    store_vec<OT, VEC>(yr + v * VEC, out);
  }
}

// Forward for wide rows, torch.compile's design (its Triton kernel reads 95 %
// of C at 4096 x 32768 bf16 on the H200; ncu: 1024-thread blocks, 32
// registers, two blocks per SM): one 1024-thread block per row and two blocks
// per SM, the row read twice. The first read, for the sum of squares, carries
// an L2 evict_last policy so the row stays in L2 over the streaming traffic;
// the second, for y, hits L2 and marks the lines evict_first (their last use).
// Two 16-byte vectors a thread are loaded before they are used. L1HINT: the
// loads also carry L1 evict_last / evict_first (as Triton's do), so that the
// second read can hit the SM's L1 (LIGER_CPP_RMS_FWD_L1HINT, A/B).
template <typename T, typename WT, typename OT, int VEC, bool L1HINT = false>
__global__ void __launch_bounds__(1024, 2)
    rms_fwd_l2hint(const T* __restrict__ x, int64_t x_stride, const WT* __restrict__ w, OT* __restrict__ y,
                   float* __restrict__ rstd, int64_t cols, float eps, float offset, bool llama) {
  pdl_trigger();  // as rms_fwd_cached: a PDL-launched backward may fill this grid's tail
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int nvec = static_cast<int>(cols / VEC);
  const int tx = threadIdx.x, TX = blockDim.x;
  const T* xr = x + row * x_stride;
  const uint64_t keep = l2_evict_policy<true>();
  float ss0 = 0.f, ss1 = 0.f;
  for (int v = tx; v < nvec; v += 2 * TX) {
    Vec<T, VEC> a, b;
    constexpr int L1K = L1HINT ? kL1Last : kL1Default;
    load_16B_hint<L1K>(a, xr + static_cast<int64_t>(v) * VEC, keep);
    const bool two = v + TX < nvec;
    if (two) load_16B_hint<L1K>(b, xr + static_cast<int64_t>(v + TX) * VEC, keep);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float f = to_float<T>(a.v[j]);
      ss0 += f * f;
    }
    if (two) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float f = to_float<T>(b.v[j]);
        ss1 += f * f;
      }
    }
  }
  const float ss = group_sum</*FIRST_USE=*/true>(ss0 + ss1, scratch);
  const float r = 1.f / sqrtf(ss / static_cast<float>(cols) + eps);
  if (tx == 0) rstd[row] = r;
  const uint64_t drop = l2_evict_policy<false>();
  OT* yr = y + row * cols;
  for (int v = tx; v < nvec; v += 2 * TX) {
    Vec<T, VEC> xv[2];
    const bool two = v + TX < nvec;
    constexpr int L1D = L1HINT ? kL1First : kL1Default;
    load_16B_hint<L1D>(xv[0], xr + static_cast<int64_t>(v) * VEC, drop);
    if (two) load_16B_hint<L1D>(xv[1], xr + static_cast<int64_t>(v + TX) * VEC, drop);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (i == 1 && !two) break;
      const int64_t c = static_cast<int64_t>(v + i * TX) * VEC;
      float wf[VEC];
      load_weight<WT, VEC>(w, c, offset, wf);
      // Struct stores: whole 16-byte words (store_16B_words) read 142.8-143.3
      // against 137.5-138.2 us at 4096 x 32768 bf16 (norm-breakdown-fwd-cap-
      // cee3049, -fwd-2pass-l1-1fa6b98 against -xchg-9427db8).
      Vec<OT, VEC> out;
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        out.v[j] = from_float<OT>(normed<T>(to_float<T>(xv[i].v[j]), r, llama) * wf[j]);
      store_vec<OT, VEC>(yr + c, out);
    }
  }
}

// ---------------------------------------------------------------------------
// Backward, persistent, row cached in registers.
// dy and dx may alias (in place): each element is read before it is written,
// by the same thread, so they are not __restrict__.
// Where the dW partial sums live (both deterministic):
//  * DW_SMEM = false: in registers (MAXV * VEC floats per thread); the groups
//    of a block are then summed through shared memory in a fixed order.
//  * DW_SMEM = true: in shared memory, one region per group, laid out
//    [i][j][tx] so a warp's updates hit distinct banks; fewer registers, so
//    more blocks per SM. Each thread only ever touches its own columns.
// DS (FusedAddRMSNorm with a residual gradient): dx += ds_out; a template
// flag so that plain RMSNorm keeps its register budget. ds_out may alias dx
// (each element is read before it is written, by the same thread).
template <typename T, typename WT, typename OT, int VEC, int MAXV, bool DW_SMEM, bool BIG, bool DS>
__global__ void __launch_bounds__(BIG ? 1024 : 512, DW_SMEM ? (BIG ? 1 : 2) : 1)
    rms_bwd_cached(const OT* dy, int64_t dy_stride, const T* __restrict__ x, int64_t x_stride,
                   const WT* __restrict__ w, const float* __restrict__ rstd, const T* ds_out,
                   int64_t ds_out_stride, T* dx, int64_t dx_stride, float* __restrict__ partial, int64_t rows,
                   int64_t cols, float offset, bool llama) {
  extern __shared__ float dw_smem[];  // [TY][MAXV][VEC][TX] when partial != nullptr
  __shared__ float scratch[kGroupScratch];
  const int tx = threadIdx.x, TX = blockDim.x;
  const int64_t nvec = cols / VEC;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.y;
  const int64_t iters = (rows + step - 1) / step;  // the same for every thread
  const int region = TX * MAXV * VEC;
  float* my_dw = dw_smem + threadIdx.y * region;

  float dw_acc[DW_SMEM ? 1 : MAXV][VEC];
  if constexpr (DW_SMEM) {
    if (partial)
      for (int c = tx; c < region; c += TX) my_dw[c] = 0.f;
  } else {
#pragma unroll
    for (int i = 0; i < MAXV; ++i)
#pragma unroll
      for (int j = 0; j < VEC; ++j) dw_acc[i][j] = 0.f;
  }

  // Per row, each vector's x, dy and w loads are followed by its part of the
  // dot product. (Issuing all loads of the row before any math, and
  // prefetching the next row into a second buffer, were both measured slower
  // on the H200: benchmarks/results/2026-11-29-h200-rms_norm-*.json.)
  Vec<T, VEC> xv[MAXV];
  Vec<OT, VEC> gv[MAXV];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  for (int64_t it = 0; it < iters; ++it) {
    const int64_t row = it * step + first;
    const bool active = row < rows;
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
      const int64_t v = static_cast<int64_t>(i) * TX + tx;
      if (active && v < nvec) {
        xv[i] = load_vec<T, VEC>(x + row * x_stride + v * VEC);
        gv[i] = load_vec<OT, VEC>(dy + row * dy_stride + v * VEC);
        float wf[VEC];
        load_weight<WT, VEC>(w, v * VEC, offset, wf);
#pragma unroll
        for (int j = 0; j < VEC; ++j) dot += to_float<OT>(gv[i].v[j]) * wf[j] * to_float<T>(xv[i].v[j]);
      }
    }
    dot = group_sum(dot, scratch);
    if (!active) continue;
    const float r = rstd[row];
    const float c = r * r * r * dot / static_cast<float>(cols);
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
      const int64_t v = static_cast<int64_t>(i) * TX + tx;
      if (v < nvec) {
        float wf[VEC];
        load_weight<WT, VEC>(w, v * VEC, offset, wf);
        float d[VEC];
        if constexpr (DS) {
#pragma unroll
          for (int j = 0; j < VEC; ++j) d[j] = 0.f;
          add_ds_out<T, VEC>(d, ds_out + row * ds_out_stride + v * VEC);
        }
        Vec<T, VEC> out;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float xf = to_float<T>(xv[i].v[j]);
          const float g = to_float<OT>(gv[i].v[j]);
          float o = r * g * wf[j] - c * xf;
          if constexpr (DS) o += d[j];
          out.v[j] = from_float<T>(o);
          if constexpr (DW_SMEM) {
            if (partial) my_dw[(i * VEC + j) * TX + tx] += g * normed<T>(xf, r, llama);
          } else {
            dw_acc[i][j] += g * normed<T>(xf, r, llama);
          }
        }
        store_vec<T, VEC>(dx + row * dx_stride + v * VEC, out);
      }
    }
  }
  if (partial == nullptr) return;
  // Sum the groups of this block into region 0 in a fixed order.
  if constexpr (DW_SMEM) {
    __syncthreads();
    if (threadIdx.y == 0)
      for (int g = 1; g < static_cast<int>(blockDim.y); ++g)
        for (int k = tx; k < region; k += TX) my_dw[k] += dw_smem[g * region + k];
  } else {
    for (int g = 0; g < static_cast<int>(blockDim.y); ++g) {
      if (static_cast<int>(threadIdx.y) == g) {
#pragma unroll
        for (int i = 0; i < MAXV; ++i)
#pragma unroll
          for (int j = 0; j < VEC; ++j) {
            const int idx = (i * VEC + j) * TX + tx;
            dw_smem[idx] = (g == 0 ? 0.f : dw_smem[idx]) + dw_acc[DW_SMEM ? 0 : i][j];
          }
      }
      __syncthreads();
    }
  }
  if (threadIdx.y != 0) return;
  // Region 0 back to column order: thread tx owns columns (i*TX+tx)*VEC+j.
  float* out = partial + static_cast<int64_t>(blockIdx.x) * cols;
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    const int64_t v = static_cast<int64_t>(i) * TX + tx;
    if (v < nvec)
#pragma unroll
      for (int j = 0; j < VEC; ++j) out[v * VEC + j] = dw_smem[(i * VEC + j) * TX + tx];
  }
}

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

// opaque_16B for any whole number of 32-bit words.
template <typename V>
__device__ __forceinline__ void opaque_words(V& v) {
  static_assert(sizeof(V) % 4 == 0, "whole words only");
  uint32_t* w = reinterpret_cast<uint32_t*>(&v);
#pragma unroll
  for (int k = 0; k < static_cast<int>(sizeof(V) / 4); ++k) asm volatile("" : "+r"(w[k]));
}

// Backward, persistent, one row per threadIdx.y group (TX = blockDim.x
// threads, MAXV vectors of VEC columns each), dW partials in registers. Unlike
// rms_bwd_cached, the next rows' x and dy are fetched while the current row
// is reduced, and the group's reduction waits on a named barrier (one per
// row) instead of the whole block (two per row). Two ways to fetch ahead:
//  * STAGES == 0: one row ahead into registers. With DS, ds_out is either
//    loaded after the reduction (DSA = false: its latency is exposed once per
//    row) or fetched one row ahead with x and dy (DSA = true).
//  * STAGES >= 2: STAGES - 1 rows ahead with cp.async into this thread's own
//    slots of shared memory: the bytes in flight cost no registers, and since
//    each thread only reads back what it copied itself, cp.async.wait_group
//    is the only synchronisation needed.
// The weights of the thread's (fixed) columns are loaded once. dy and dx may
// alias (the rows fetched ahead are never the row being written); so may
// ds_out and dx (each element read by its thread before written).
// __launch_bounds__(1024, 1) caps it at 64 registers (measured with -Xptxas
// -v: no spills with MAXV = 1): 32 warps per SM, twice rms_bwd_cached's 16.
template <typename T, typename WT, typename OT, int VEC, int MAXV, int STAGES, bool DS, bool DSA = false>
__global__ void __launch_bounds__(1024, 1)
    rms_bwd_pipe(const OT* dy, int64_t dy_stride, const T* __restrict__ x, int64_t x_stride,
                 const WT* __restrict__ w, const float* __restrict__ rstd, const T* ds_out,
                 int64_t ds_out_stride, T* dx, int64_t dx_stride, float* __restrict__ partial, int64_t rows,
                 int64_t cols, float offset, bool llama) {
  using XV = Vec<T, VEC>;
  using GV = Vec<OT, VEC>;
  static_assert(sizeof(XV) % 16 == 0 && sizeof(GV) % 16 == 0, "whole 16-byte vectors only");
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

  constexpr bool DS_AHEAD = DS && DSA && STAGES == 0;
  auto fetch_ds = [&](int64_t row, XV(&dd)[MAXV]) {
    if (row >= rows) return;
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
      const int64_t v = static_cast<int64_t>(i) * TX + tx;
      if (has[i]) dd[i] = load_vec<T, VEC>(ds_out + row * ds_out_stride + v * VEC);
    }
  };

  XV xv[MAXV];
  GV gv[MAXV];
  XV dcur[DS_AHEAD ? MAXV : 1];
  if constexpr (STAGES == 0) {
    fetch_regs(first, xv, gv);
    if constexpr (DS_AHEAD) fetch_ds(first, dcur);
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
    XV dn[DS_AHEAD ? MAXV : 1];
    if constexpr (STAGES == 0) fetch_regs(row + step, xn, gn);  // in flight during the barrier
    if constexpr (DS_AHEAD) fetch_ds(row + step, dn);
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
            if constexpr (STAGES > 0) {
#pragma unroll
              for (int k = 0; k < CD; ++k) reinterpret_cast<uint4*>(&dv)[k] = *slot(stage, CX + CG + k, i);
            } else if constexpr (DS_AHEAD) {
              dv = dcur[i];
            } else {
              dv = load_vec<T, VEC>(ds_out + row * ds_out_stride + v * VEC);
            }
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
        if constexpr (DS_AHEAD) dcur[i] = dn[i];
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

// ---------------------------------------------------------------------------
// Backward for wide rows (sm_90): rows of more than 1024 vectors, which
// rms_bwd_pipe (one vector a thread, <= 1024 threads) cannot hold, are split
// over a thread-block cluster of CL blocks instead of giving each thread
// several vectors (rms_bwd_cached: 4 vectors a thread spilled 120-136 bytes
// under the 64-register cap of 1024 threads, and ran at ~50 % of the copy
// bandwidth at 4096 x 32768 bf16 fwd+bwd). Block `rank` owns vectors
// [rank * blockDim.x, (rank + 1) * blockDim.x) of every row, one per thread,
// so each thread owns VEC fixed columns: their weights stay in registers and
// their dW partial sums accumulate in fp32 registers.
//
// The grid is persistent: cluster c of nclusters = gridDim.x / CL takes units
// of R rows (R = 1 or 2) c, c + nclusters, ... Per unit (message k of this
// cluster; RowSumExchange<R>):
//   1. the thread's part of sum(dy * w * x) for each row, summed over the warp
//      (shuffles);
//   2. lane q < CL of every warp sends the warp's R sums to block q: st.async
//      into slot k & 1 of block q's red, completing 4 * R bytes of that slot's
//      mbarrier. Each block receives all CL * nwarps messages;
//   3. the next unit's x and dy (and rstd), and this unit's ds_out, are put in
//      flight, then every thread waits on its own block's mbarrier;
//   4. every warp sums the CL * nwarps values of each row in one fixed order
//      (lane l takes entries l, l + 32, ..., then an xor butterfly, whose
//      result is bitwise the same in every lane): every block gets the same,
//      reproducible row sums;
//   5. dx and the dW partials from the registers, and the next unit's step 1.
// No cluster barrier a row (RowSumExchange says why two slots make it
// unneeded) and no memory fence: the st.async data is made visible by the
// mbarrier. (A cluster barrier a row, keeping a fast block from overwriting a
// single slot before a slow one had read it, cost 237.9 against 230.4 us at
// 8192 x 16384 and 276.4 against 252.6 us at 2048 x 65536 bf16 fwd+bwd on the
// H200: 2026-12-01-h200-norm-breakdown-xchg-9427db8.log.)
// At the end each block writes its columns of the cluster's partial row
// (partial[c][:]), finished by reduce_partials over the nclusters rows.
// dy and dx may alias (in place): the row fetched ahead is never the row
// being written, and rows belong to one cluster. ds_out may alias dx (each
// element is read by its thread before it is written).
// __launch_bounds__(1024, 1): 64 registers, so one 1024-thread block or two
// 512-thread blocks per SM (the host picks blockDim.x <= 1024, a multiple of 32).
constexpr int kWideMaxCluster = 8;                   // portable cluster size
constexpr int kWideMaxParts = kWideMaxCluster * 32;  // warp sums per row: CL * (blockDim.x / 32)
static_assert(kWideMaxParts % 32 == 0, "a whole number of entries per lane");

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// R floats at slot (R = 1 or 2, slot 8-byte aligned for 2) into block
// `rank`'s shared memory (the same offsets in every block), completing 4 * R
// bytes of that block's mbarrier *bar.
template <int R>
__device__ __forceinline__ void st_async_floats(float* slot, unsigned long long* bar, uint32_t rank,
                                                const float (&v)[R]) {
  static_assert(R == 1 || R == 2, "one or two floats a message");
  const uint32_t rslot = peer_addr(slot, rank), rbar = peer_addr(bar, rank);
  if constexpr (R == 1) {
    st_async_b32(rslot, rbar, __float_as_uint(v[0]));
  } else {
    st_async_v2(rslot, rbar, __float_as_uint(v[0]), __float_as_uint(v[1]));
  }
}

// The row-sum exchange of rms_bwd_cluster and rms_fwd_cluster (the protocol:
// rms_bwd_cluster's comment). Message k carries R rows' warp sums: every
// warp's lane q < cl sends its R sums to block q, into red[k & 1][(rank *
// nwarps + warp) * R + i]; bars[k & 1] completes when all `bytes` (nparts * R
// * 4) of the message have landed in this block. Two slots and no cluster
// barrier a message: a peer can only send message k + 2 (into slot k & 1)
// after its own collect of message k + 1, which needs every warp of this
// block to have sent k + 1, which each warp does after reading message k: the
// data dependencies order the slot's reuse. Thread 0 re-arms bars[k & 1]
// after waiting for message k; a peer's bytes of message k + 2 landing before
// that arrive cannot complete the phase (its arrival is still pending).
template <int R>
struct RowSumExchange {
  static constexpr int kSlots = 2;
  static constexpr int kSlotFloats = kWideMaxParts * R;
  float* red;                // [kSlots][kSlotFloats]
  unsigned long long* bars;  // [kSlots]
  uint32_t cl, rank, bytes;
  int nparts, nwarps, warp, lane;

  // Before the first message: thread 0 arms the mbarriers, and every block's
  // are armed before any message reaches them (the cluster barrier).
  __device__ __forceinline__ void init() {
    if (threadIdx.x == 0) {
#pragma unroll
      for (int q = 0; q < kSlots; ++q) {
        mbar_init(&bars[q]);
        mbar_expect_tx(&bars[q], bytes);
      }
      fence_mbar_init();
    }
    cluster_arrive_relaxed();
    cluster_wait();
  }

  // Sends this warp's R sums v (the same in every lane) of message k.
  __device__ __forceinline__ void send(uint32_t k, const float (&v)[R]) {
    const int slot = static_cast<int>(k & 1);
    if (lane < static_cast<int>(cl))
      st_async_floats<R>(&red[slot * kSlotFloats + (rank * nwarps + warp) * R], &bars[slot], lane, v);
  }

  // Waits for message k and returns its R row sums, each added in one fixed
  // order (every block of the cluster gets the same values).
  __device__ __forceinline__ void collect(uint32_t k, float (&s)[R]) {
    const int slot = static_cast<int>(k & 1);
    mbar_wait(&bars[slot], (k >> 1) & 1);
    const float* m = red + slot * kSlotFloats;
#pragma unroll
    for (int i = 0; i < R; ++i) s[i] = 0.f;
#pragma unroll
    for (int c = 0; c < kWideMaxParts / 32; ++c)
      if (c * 32 + lane < nparts) {
#pragma unroll
        for (int i = 0; i < R; ++i) s[i] += m[(c * 32 + lane) * R + i];
      }
#pragma unroll
    for (int i = 0; i < R; ++i) s[i] = warp_sum(s[i]);
    if (threadIdx.x == 0) mbar_expect_tx(&bars[slot], bytes);
  }

  // After the last message: no block exits while a peer may still use it.
  __device__ __forceinline__ void finish() {
    cluster_arrive_relaxed();
    cluster_wait();
  }
};
#endif

//
// rms_bwd_tma's instruction cuts: the weights (+ offset; ones when absent, so
// no branch a row) converted once into static shared memory as floats (each
// thread reads back only what it wrote: no barrier), x, dy and ds_out widened
// with unpack_floats (word ops), cols' reciprocal taken once instead of a
// full division a row; and launched with PDL, waiting for the forward's
// writes (its blocks start 2.5 us before the forward ends): backward 245.5 ->
// 235.3 us, call span 80.6 -> 83.7 % of C at 8192 x 16384 bf16 on the H200
// (2026-12-01-h200-norm-breakdown-wide-7e5f4b4.log).
// R = 2: rows in pairs (unit u: rows 2u, 2u + 1), one message of two sums a
// pair (see cluster_rows for when).
// MAXT = 768 (R = 2 only; the default for blocks of 513..768 threads, see
// cluster_wide_regs): those run one block a SM at 64 registers anyway (bf16
// hidden 8208..12288 in clusters of two); at 768 ptxas allows 80 registers
// (65536 / 768, rounded down to its granularity): no spills with x, w and dy
// all bf16 (32 / 64 bytes at 64 registers, without / with ds_out), fewer
// elsewhere (fp16 8-28 against 64-148 bytes; fp32 dy 44-100 against
// 160-324). Measured on bf16 only (kernel times in cluster_wide_regs).
template <typename T, typename WT, typename OT, int VEC, bool DS, int R, int MAXT = 1024>
__global__ void __launch_bounds__(MAXT, 1)
    rms_bwd_cluster(const OT* dy, int64_t dy_stride, const T* __restrict__ x, int64_t x_stride,
                    const WT* __restrict__ w, const float* __restrict__ rstd, const T* ds_out,
                    int64_t ds_out_stride, T* dx, int64_t dx_stride, float* __restrict__ partial,
                    int64_t rows, int64_t cols, float offset, bool llama) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using XV = Vec<T, VEC>;
  using GV = Vec<OT, VEC>;
  using Xchg = RowSumExchange<R>;
  static_assert(sizeof(XV) % 16 == 0 && sizeof(GV) % 16 == 0, "whole 16-byte vectors only");
  __shared__ alignas(16) float red[Xchg::kSlots * Xchg::kSlotFloats];
  __shared__ alignas(8) unsigned long long bars[Xchg::kSlots];
  const int tx = threadIdx.x, lane = tx & 31, warp = tx >> 5, nwarps = blockDim.x >> 5;
  const uint32_t cl = cluster_nctarank(), rank = cluster_ctarank();
  const int nparts = static_cast<int>(cl) * nwarps;
  Xchg xc{red, bars, cl, rank, static_cast<uint32_t>(nparts * R) * 4u, nparts, nwarps, warp, lane};
  // The cluster is 1-D along x: its blocks are consecutive in blockIdx.x.
  // Units of R rows: cluster c takes units c, c + nclusters, ...
  const int64_t units = (rows + R - 1) / R;
  const int64_t first = blockIdx.x / cl, step = gridDim.x / cl;
  const int64_t nvec = cols / VEC;
  const int64_t v = static_cast<int64_t>(rank) * blockDim.x + tx;
  const bool has = v < nvec;
  // Launched with PDL (where enabled): nothing global is read before the
  // forward's writes are visible; the dW reduction may then start its blocks
  // as this persistent grid's blocks exit.
  pdl_wait();
  pdl_trigger();
  xc.init();

  // [VEC / 4][1024] float4s (blockDim.x <= 1024), 16-32 KiB.
  __shared__ float4 w_smem[VEC / 4 * 1024];
  // No weight: ones stored, so weights() has no branch on w.
  if (w != nullptr && has) {
    store_weight_floats<WT, VEC>(w_smem + tx, 1024, w + v * VEC, offset);
  } else if (has) {
    store_weight_ones<VEC>(w_smem + tx, 1024);
  }
  auto weights = [&](float (&wf)[VEC]) { load_weight_floats<VEC>(w_smem + tx, 1024, true, wf); };
  const float inv_cols = 1.f / static_cast<float>(cols);
  float dw_acc[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) dw_acc[j] = 0.f;
  // Volatile loads: issued where written (before the mbarrier wait), not sunk
  // next to their first use in the next iteration.
  auto fetch = [&](int64_t u, XV(&xd)[R], GV(&gd)[R], float (&rd)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int64_t row = u * R + i;
      if (has && row < rows) {
        load_words_volatile(xd[i], x + row * x_stride + v * VEC);
        load_words_volatile(gd[i], dy + row * dy_stride + v * VEC);
      }
      rd[i] = row < rows ? rstd[row] : 0.f;
    }
  };
  XV xv[R];
  GV gv[R];
  float r_next[R];
  fetch(first, xv, gv, r_next);

  uint32_t k = 0;
  // The trip count is the same for every thread of a cluster: each one sends
  // every message.
  for (int64_t u = first; u < units; u += step, ++k) {
    float r[R], dot[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      r[i] = r_next[i];
      dot[i] = 0.f;
    }
    if (has) {
      float wf[VEC];
      weights(wf);
#pragma unroll
      for (int i = 0; i < R; ++i) {
        if (u * R + i >= rows) continue;  // the odd last row's pair
        float xf[VEC], gf[VEC];
        unpack_floats<T, VEC>(xv[i], xf);
        unpack_floats<OT, VEC>(gv[i], gf);
#pragma unroll
        for (int j = 0; j < VEC; ++j) dot[i] += gf[j] * wf[j] * xf[j];
      }
    }
#pragma unroll
    for (int i = 0; i < R; ++i) dot[i] = warp_sum(dot[i]);
    xc.send(k, dot);
    // Keep x and dy packed through the wait (the converted floats spilled in
    // rms_bwd_pipe), and put the next unit's loads in flight.
#pragma unroll
    for (int i = 0; i < R; ++i) {
      opaque_words(xv[i]);
      opaque_words(gv[i]);
    }
    XV xn[R];
    GV gn[R];
    fetch(u + step, xn, gn, r_next);
    XV dv[R];
    if constexpr (DS) {
#pragma unroll
      for (int i = 0; i < R; ++i)
        if (has && u * R + i < rows)
          load_words_volatile(dv[i], ds_out + (u * R + i) * ds_out_stride + v * VEC);
    }
    float s[R];
    xc.collect(k, s);
    if (has) {
      float wf[VEC];
      weights(wf);
#pragma unroll
      for (int i = 0; i < R; ++i) {
        const int64_t row = u * R + i;
        if (row >= rows) continue;
        const float c = r[i] * r[i] * r[i] * s[i] * inv_cols;
        float o[VEC], xf[VEC], gf[VEC];
        unpack_floats<T, VEC>(xv[i], xf);
        unpack_floats<OT, VEC>(gv[i], gf);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          o[j] = r[i] * gf[j] * wf[j] - c * xf[j];
          dw_acc[j] += gf[j] * normed<T>(xf[j], r[i], llama);
        }
        if constexpr (DS) {
          float df[VEC];
          unpack_floats<T, VEC>(dv[i], df);
#pragma unroll
          for (int j = 0; j < VEC; ++j) o[j] += df[j];
        }
        store_16B_words(dx + row * dx_stride + v * VEC, pack_vec<T, VEC>(o));
      }
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {
      xv[i] = xn[i];
      gv[i] = gn[i];
    }
  }
  xc.finish();
  if (partial != nullptr && has) {
    Vec<float, VEC> out;
#pragma unroll
    for (int j = 0; j < VEC; ++j) out.v[j] = dw_acc[j];
    store_vec<float, VEC>(partial + first * cols + v * VEC, out);
  }
#else
  __trap();  // the host launches this kernel only where its sm_90 code runs
#endif
}

// Forward for wide rows (sm_90), rms_bwd_cluster's design: rows of more than
// 1024 vectors are split over a thread-block cluster of CL blocks, one vector
// a thread, instead of rms_fwd_cached's 4 vectors a thread (one 1024-thread
// block per row and SM, so the SM has no loads in flight while it reduces:
// 76.6 % of C at 4096 x 32768 bf16 on the H200) or rms_fwd_generic's
// shared-memory stash (62.6 % at 2048 x 65536). Block `rank` owns vectors
// [rank * blockDim.x, (rank + 1) * blockDim.x) of every row, so each thread
// owns VEC fixed columns and keeps their weights in registers.
//
// Persistent grid: cluster c of nclusters = gridDim.x / CL takes rows c,
// c + nclusters, ... Per row:
//   1. the next row's x (and residual) loads are put in flight (volatile, so
//      they stay where written): they land while this row is reduced;
//   2. with ADD, s = x + res is formed, rounded to T and stored; the thread's
//      sum of squares (of s with ADD, else x), summed over the warp;
//   3. cluster wait, then lane q < CL of every warp sends the warp sum to block
//      q (st.async completing on block q's mbarrier), each block waits on its
//      own mbarrier and sums the CL * nwarps values in one fixed order: every
//      block gets the same, reproducible sum of squares, hence the same rstd;
//   4. cluster arrive (relaxed: "done reading red"), then y from the registers
//      with packed 16-byte stores; rank 0's thread 0 writes rstd.
// The exchange, its mbarrier phases and the barrier that keeps a fast block
// from overwriting red before a slow one has read it are rms_bwd_cluster's
// (see there for why no fence is needed).
// The values are rms_fwd_cached's: s rounded as its packed path rounds it,
// rstd = 1 / sqrtf(ss / cols + eps), y = normed(x, rstd) * (w + offset) (ones
// without a weight) in fp32, rounded to OT; only the order in which the
// squares are summed differs.
// __launch_bounds__(1024, 1): 64 registers, as the backward (measured with
// -Xptxas -v: no spills).
template <typename T, typename WT, typename OT, int VEC, bool ADD>
__global__ void __launch_bounds__(1024, 1)
    rms_fwd_cluster(const T* __restrict__ x, int64_t x_stride, const T* __restrict__ res, int64_t res_stride,
                    T* __restrict__ s, const WT* __restrict__ w, OT* __restrict__ y, float* __restrict__ rstd,
                    int64_t rows, int64_t cols, float eps, float offset, bool llama) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using XV = Vec<T, VEC>;
  static_assert(sizeof(XV) == 16, "one 16-byte vector a thread");
  using Xchg = RowSumExchange<1>;
  __shared__ float red[Xchg::kSlots * Xchg::kSlotFloats];  // the rows' warp sums
  __shared__ alignas(8) unsigned long long bars[Xchg::kSlots];
  const int tx = threadIdx.x, lane = tx & 31, warp = tx >> 5, nwarps = blockDim.x >> 5;
  const uint32_t cl = cluster_nctarank(), rank = cluster_ctarank();
  const int nparts = static_cast<int>(cl) * nwarps;
  Xchg xc{red, bars, cl, rank, static_cast<uint32_t>(nparts) * 4u, nparts, nwarps, warp, lane};
  // The cluster is 1-D along x: its blocks are consecutive in blockIdx.x.
  const int64_t first = blockIdx.x / cl, step = gridDim.x / cl;
  const int64_t nvec = cols / VEC;
  const int64_t v = static_cast<int64_t>(rank) * blockDim.x + tx;
  const bool has = v < nvec;
  const int64_t col = v * VEC;
  xc.init();

  Vec<WT, VEC> wv;
  if (w != nullptr && has) wv = load_vec<WT, VEC>(w + col);
  auto weight = [&](int j) { return w != nullptr ? to_float<WT>(wv.v[j]) + offset : 1.f; };
  auto fetch = [&](int64_t row, XV& xd, XV& rd) {
    if (has && row < rows) {
      load_words_volatile(xd, x + row * x_stride + col);
      if constexpr (ADD) load_words_volatile(rd, res + row * res_stride + col);
    }
  };
  XV xv, rv;
  fetch(first, xv, rv);

  uint32_t k = 0;
  // The trip count is the same for every thread of a cluster: each one
  // reaches every cluster barrier.
  for (int64_t row = first; row < rows; row += step, ++k) {
    XV xn, rn;
    fetch(row + step, xn, rn);
    float ss = 0.f;
    if (has) {
      if constexpr (ADD) {
        float f[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) f[j] = to_float<T>(xv.v[j]) + to_float<T>(rv.v[j]);
        xv = pack_vec<T, VEC>(f);
        store_16B_words(s + row * cols + col, xv);
      }
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float f = to_float<T>(xv.v[j]);
        ss += f * f;
      }
    }
    const float sq[1] = {warp_sum(ss)};
    xc.send(k, sq);
    // Keep x (s) and w packed through the wait, not as the floats converted
    // above (as in rms_bwd_cluster).
    opaque_words(xv);
    opaque_words(wv);
    float tot[1];
    xc.collect(k, tot);
    const float r = 1.f / sqrtf(tot[0] / static_cast<float>(cols) + eps);
    if (rank == 0 && tx == 0) rstd[row] = r;
    if (has) {
      float o[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) o[j] = normed<T>(to_float<T>(xv.v[j]), r, llama) * weight(j);
      store_16B_words(y + row * cols + col, pack_vec<OT, VEC>(o));
    }
    xv = xn;
    if constexpr (ADD) rv = rn;
  }
  xc.finish();
#else
  __trap();  // the host launches this kernel only where its sm_90 code runs
#endif
}

// ---------------------------------------------------------------------------
// TMA row pipeline (sm_90): rms_bwd_tma, for rows of kTmaMinVec..1024 16-byte
// vectors (bf16 hidden 512-8192). The rows come into shared memory by TMA
// bulk copies (cp.async.bulk, completing on an mbarrier), so bytes in flight
// cost no registers (cross_entropy.cu's ce_smem_kernel went from 84 to 89 % of
// C that way, layer_norm.cu's backward from 55.9 to 77.7 %). The same pipeline
// for the forward (rms_fwd_tma, one operand) ran at 75.0 / 75.5 / 77.9 % of C
// against 89.3 / 93.8 / 94.0 % for rms_fwd_cached at 16384x4096 / 131072x1024
// / 32768x4096 (2026-11-30-h200-rms_norm-tma-0686c5e.log) and was removed:
// with a few rows in flight per SM each row's reduction stays exposed, where
// the register-cached forward has many rows in flight.
//
// Persistent grid, one row at a time per block of blockDim.x threads (nvec
// rounded up to a warp), one 16-byte vector a thread: block b takes rows b,
// b + gridDim.x, ... Each thread owns VEC fixed columns, so its weights are
// loaded once (and, in the backward, its dW partial sums stay in fp32
// registers). `stages` rows (kTmaMaxStages at most) sit in dynamic shared
// memory, one mbarrier each; the block's k-th row goes to stage k % stages,
// and the n-th use of a stage waits for mbarrier phase parity n & 1. Before
// the loop warp 0 puts the first `stages` rows in flight. Per row:
//   1. wait for the stage's mbarrier; each thread copies its vector(s) from
//      the stage into registers and forms its part of the row sum;
//   2. warp sums (shuffles) into part[k & 1][warp], ONE __syncthreads, then
//      every warp adds the per-warp partials in one fixed order (lane l takes
//      partial l, then an xor butterfly: bitwise the same in every lane), so
//      the result is deterministic;
//   3. past that barrier every thread has read the stage, so warp 0 refills
//      it with the row `stages` ahead;
//   4. the outputs from the registers, with packed 16-byte stores.
// part is double-buffered by row parity: a thread writes part[k & 1] for row
// k only after row k - 1's barrier, which every thread reaches only after
// reading row k - 2's partials (the same buffer).
// Per element the formulas are rms_fwd_cached's and rms_bwd_pipe's, in the
// same order; the row sums add the same terms in another (fixed) order.
constexpr int kTmaMaxStages = 8;
constexpr int64_t kTmaMinVec = 64;  // narrower rows: the register-cached kernels (many rows a block)

// Bytes of one operand's row in a stage: rounded up to 128 so that every
// operand of every stage starts 128-byte aligned (the backward's fp32 dy
// vectors are 32 bytes; its x rows may be an odd number of 16-byte vectors).
__host__ __device__ constexpr uint32_t tma_row_region(int64_t row_bytes) {
  return static_cast<uint32_t>((row_bytes + 127) / 128 * 128);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr int kTmaChunkBytes = 4096;  // one bulk copy per chunk, issued by the lanes of warp 0

// Called by all of warp 0: copies `bytes` (a multiple of 16) from src into
// the stage at dst, in kTmaChunkBytes pieces spread over the lanes, each
// completing its bytes of *bar's transaction count. The caller arms *bar.
__device__ __forceinline__ void tma_copy_row(unsigned char* dst, const void* src, uint32_t bytes,
                                             unsigned long long* bar, int lane) {
  const unsigned char* s = static_cast<const unsigned char*>(src);
  for (uint32_t c = static_cast<uint32_t>(lane) * kTmaChunkBytes; c < bytes; c += 32u * kTmaChunkBytes)
    bulk_copy_g2s(dst + c, s + c, bytes - c < kTmaChunkBytes ? bytes - c : kTmaChunkBytes, bar);
}

// Before the first row: thread 0 initialises the stages' mbarriers (made
// visible to the TMA engine by the fences, and to the other threads by the
// caller's __syncthreads).
__device__ __forceinline__ void tma_init_bars(unsigned long long* bars, int stages) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) mbar_init(&bars[s]);
    fence_mbar_init();
    fence_proxy_async_smem();
  }
}

// Called by all of warp 0 before it refills a stage that the block's threads
// have read (ordered before this by a __syncthreads): a proxy fence between
// those generic-proxy reads and the async-proxy writes of the bulk copies,
// as the PTX proxy model asks for. In practice no read can still be pending:
// every value read from the stage is used in the row sum before the barrier
// (CUTLASS's TMA pipelines release a stage without this fence). Its cost is
// one MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC.S per row, in warp 0 only.
__device__ __forceinline__ void tma_fence_reads() { fence_proxy_async_smem(); }

// The row sums of the block (R rows), from each warp's sums v: ONE
// __syncthreads, then every warp adds the partials in the same fixed order.
// part[pb] must not be read by any thread any more (see the comment above).
// The barrier is also the caller's "every thread has read the stage".
template <int R>
__device__ __forceinline__ void tma_block_sum(float (&v)[R], float (*part)[R][32], int pb) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < R; ++i) v[i] = warp_sum(v[i]);
  if (lane == 0)
#pragma unroll
    for (int i = 0; i < R; ++i) part[pb][i][warp] = v[i];
  __syncthreads();
#pragma unroll
  for (int i = 0; i < R; ++i)
    v[i] = warp_sum(lane < static_cast<int>(blockDim.x >> 5) ? part[pb][i][lane] : 0.f);
}
#endif

// Backward, x and dy rows of each stage in one mbarrier phase (dy's region
// after x's). dx = r * dy * (w + offset) - r^3 * x * dot / cols and the dW
// partials dy * normed(x, r) as rms_bwd_pipe; each block writes its partial
// row (partial[blockIdx.x][:]) at the end, finished by reduce_partials. rstd
// is loaded one row ahead into a register, as rms_bwd_pipe: its latency is
// not on the row's critical path. dy and dx may alias (in place): the rows
// fetched ahead are never the row being written, and each row belongs to
// one block.
// __launch_bounds__(1024, 1): 64 registers (VEC fp32 dW sums, the weights,
// x and dy a thread).
//
// Instructions a row are what limits it: the first version issued 0.75 warps
// a cycle per scheduler at 16384 x 4096 and ran at 88 % of what torch.add's
// two reads and one write reach at that shape (2026-11-30-h200-ncu-rms_bwd_tma-
// 31e1c76.txt, -norm-breakdown-bwd-alone-be01842, -reduce4-cvt1-4f6a296). So
// the thread's weights (+ offset) are converted once into shared memory as
// floats (w_smem, after the stages; each row re-converted them twice), x and
// dy are widened with unpack_floats, and cols' reciprocal is taken once (a
// full IEEE division a row before; exact for power-of-two widths, else within
// an ulp of c): 116.8 -> 110.3 us, fwd+bwd 83.6 -> 86.0 % of C
// (rms_norm-tma-4945b12, the bwd=tma-v1 row).
// R = 2 (LIGER_CPP_RMS_TMA_PAIRS, default on; the MAXT = 768 build): a stage
// holds two consecutive rows (one mbarrier phase), and the block takes row
// pairs b, b + gridDim.x, ...: one barrier for two rows' sums and twice the
// independent work between barriers. For rows of 513..768 threads (bf16
// hidden 4104..6144), which run one block a SM: 20 / 24 warps, each row's
// reduction exposed (rms_bwd_tma 239.5 us at 26214x5120, 79.6 % of C, against
// 86.5 % at 4096; two-blocks-a-SM builds at 48 / 40 registers spilled and
// ran 264.6 / 396.2 us at 5120 / 6144: 2026-12-01-h200-norm-breakdown-
// 2blk-762ed2c.log). At one block a SM, 768 threads may take 80 registers
// (ptxas: 65536 / 768, rounded down to its allocation granularity).
template <typename T, typename WT, typename OT, int VEC, int MAXT = 1024, int R = 1>
__global__ void __launch_bounds__(MAXT, 1)
    rms_bwd_tma(const OT* dy, int64_t dy_stride, const T* __restrict__ x, int64_t x_stride,
                const WT* __restrict__ w, const float* __restrict__ rstd, T* dx, int64_t dx_stride,
                float* __restrict__ partial, int64_t rows, int64_t cols, float offset, bool llama,
                int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using XV = Vec<T, VEC>;
  using GV = Vec<OT, VEC>;
  static_assert(sizeof(XV) == 16 && sizeof(GV) % 16 == 0, "whole 16-byte vectors only");
  static_assert(R == 1 || R == 2, "one or two rows a stage");
  constexpr int CG = sizeof(GV) / 16;
  extern __shared__ __align__(128) unsigned char tma_rows[];  // [stages][R][x region, dy region]
  __shared__ alignas(8) unsigned long long bars[kTmaMaxStages];
  __shared__ float part[2][R][32];
  const int tx = threadIdx.x, lane = tx & 31, warp = tx >> 5;
  const bool has = tx < cols / VEC;
  const int64_t col = static_cast<int64_t>(tx) * VEC;
  const uint32_t x_bytes = static_cast<uint32_t>(cols * sizeof(T));
  const uint32_t g_bytes = static_cast<uint32_t>(cols * sizeof(OT));
  const uint32_t x_region = tma_row_region(x_bytes);
  const uint32_t row_region = x_region + tma_row_region(g_bytes);
  const uint32_t region = row_region * R;
  const int64_t groups = (rows + R - 1) / R;  // row groups (pairs when R = 2)
  const int64_t first = blockIdx.x, step = gridDim.x;
  tma_init_bars(bars, stages);
  __syncthreads();  // the mbarriers are initialised before any thread waits on them
  // Launched with PDL (launch_pdl): nothing global is read before the previous
  // kernel's writes are visible. The dW reduction, launched next, may then
  // start its blocks as this persistent grid's blocks exit.
  pdl_wait();
  pdl_trigger();
  // The rows of group g: R, fewer for a short last group.
  auto group_rows = [&](int64_t g) {
    return R == 1 ? 1 : static_cast<int>(rows - g * R < R ? rows - g * R : R);
  };
  auto fetch = [&](int64_t g, int s) {  // all of warp 0: group g's rows into stage s
    const int n = group_rows(g);
    if (lane == 0) mbar_expect_tx(&bars[s], n * (x_bytes + g_bytes));
    for (int i = 0; i < n; ++i) {
      unsigned char* dst = tma_rows + s * region + i * row_region;
      tma_copy_row(dst, x + (g * R + i) * x_stride, x_bytes, &bars[s], lane);
      tma_copy_row(dst + x_region, dy + (g * R + i) * dy_stride, g_bytes, &bars[s], lane);
    }
  };
  if (warp == 0)
    for (int s = 0; s < stages && first + s * step < groups; ++s) fetch(first + s * step, s);

  // [VEC / 4][blockDim.x] float4s; each thread reads back only what it wrote.
  float4* const w_smem = reinterpret_cast<float4*>(tma_rows + static_cast<size_t>(stages) * region) + tx;
  if (w != nullptr && has) store_weight_floats<WT, VEC>(w_smem, blockDim.x, w + col, offset);
  auto weights = [&](float (&wf)[VEC]) { load_weight_floats<VEC>(w_smem, blockDim.x, w != nullptr, wf); };
  const float inv_cols = 1.f / static_cast<float>(cols);
  float dw_acc[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) dw_acc[j] = 0.f;
  // first < groups: the grid has at most `groups` blocks
  float r_next[R];
#pragma unroll
  for (int i = 0; i < R; ++i) r_next[i] = R == 1 || first * R + i < rows ? rstd[first * R + i] : 0.f;
  int s = 0, pb = 0;
  uint32_t phase = 0;
  for (int64_t g = first; g < groups; g += step) {
    float r[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      r[i] = r_next[i];
      const int64_t nr = (g + step) * R + i;
      r_next[i] = nr < rows ? rstd[nr] : 0.f;
    }
    const int n = group_rows(g);  // row g * R + i exists for i < n
    mbar_wait(&bars[s], phase);
    XV xv[R];
    GV gv[R];
    float dot[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      dot[i] = 0.f;
      if (has && i < n) {
        const unsigned char* st = tma_rows + s * region + i * row_region;
        xv[i] = reinterpret_cast<const XV*>(st)[tx];
#pragma unroll
        for (int c = 0; c < CG; ++c)
          reinterpret_cast<uint4*>(&gv[i])[c] = reinterpret_cast<const uint4*>(st + x_region)[tx * CG + c];
        float xf[VEC], gf[VEC], wf[VEC];
        unpack_floats<T, VEC>(xv[i], xf);
        unpack_floats<OT, VEC>(gv[i], gf);
        weights(wf);
#pragma unroll
        for (int j = 0; j < VEC; ++j) dot[i] += gf[j] * wf[j] * xf[j];
      }
      // Keep x and dy packed through the barrier (the converted floats spilled
      // in rms_bwd_pipe).
      opaque_words(xv[i]);
      opaque_words(gv[i]);
    }
    tma_block_sum<R>(dot, part, pb);
    const int64_t ahead = g + stages * step;
    if (warp == 0 && ahead < groups) {
      tma_fence_reads();
      fetch(ahead, s);
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {
      if (!has || i >= n) continue;
      float o[VEC];
      const float c = r[i] * r[i] * r[i] * dot[i] * inv_cols;
      float xf[VEC], gf[VEC], wf[VEC];
      unpack_floats<T, VEC>(xv[i], xf);
      unpack_floats<OT, VEC>(gv[i], gf);
      weights(wf);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        o[j] = r[i] * gf[j] * wf[j] - c * xf[j];
        dw_acc[j] += gf[j] * normed<T>(xf[j], r[i], llama);
      }
      store_16B_words(dx + (g * R + i) * dx_stride + col, pack_vec<T, VEC>(o));
    }
    pb ^= 1;
    if (++s == stages) {
      s = 0;
      phase ^= 1;
    }
  }
  if (partial != nullptr && has) {
    Vec<float, VEC> out;
#pragma unroll
    for (int j = 0; j < VEC; ++j) out.v[j] = dw_acc[j];
    store_vec<float, VEC>(partial + static_cast<int64_t>(blockIdx.x) * cols + col, out);
  }
#else
  __trap();  // the host launches this kernel only where its sm_90 code runs
#endif
}

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

// ---------------------------------------------------------------------------
// Host-side planning.

// Which rms_fwd_cached variant runs (FwdMode). Read on every call (one getenv
// per launch), so that benchmarks can A/B the variants in one process and the
// tests can run each of them:
//   LIGER_CPP_RMS_ADD_FWD=old|pack|new, FusedAddRMSNorm (default new). The old
//     bf16 ADD forward ran at 60.6 % of C at 16384 x 4096 on the H200 against
//     88.8 % for plain RMSNorm (benchmarks/results/2026-11-30-h200-*-9f9f3e6.log),
//     with half of its s and y vectors stored as 8 x 2-byte stores each.
//   LIGER_CPP_RMS_FWD=old|pack|new, plain RMSNorm (default old: its split y
//     stores are 4 x 32-bit, a smaller loss, and new measured no better:
//     87.5 / 89.9 / 94.1 / 75.8 % of C against 88.0 / 91.3 / 93.6 / 76.2 % at
//     16384x4096 / 8192x16384 / 131072x1024 / 4096x32768,
//     benchmarks/results/2026-11-30-h200-rms_norm-quick-c1a3bfe.log).
// Plain RMSNorm's register-cached forward, by default (each knob read on
// every call overrides its part; A/B measurements):
//  * up to 128 vectors (bf16 hidden 1024): 2 vectors a thread
//    (LIGER_CPP_RMS_FWD_V=2|4; 32 registers, a whole SM's threads resident)
//    in 128-thread blocks (LIGER_CPP_RMS_FWD_TY);
//  * above: 4 vectors a thread, one row a block, in a 40-register build for
//    512-thread rows (bf16 hidden 16K; fwd_reg_capped).
// Kernel times at 131072 x 1024 / 65536 x 2048 / 16384 x 4096 / 16384 x 8192
// bf16 on the H200, default before (4 vectors, 256-thread blocks) -> now:
// 133.1 -> 130.9, 133.2 -> 129.6, 69.2 -> 67.4, 132.9 -> 131.9 us
// (2026-12-01-h200-norm-breakdown-fwd-v-9427db8.log, -fwd-ab-5fb7fac.log,
// -fwd-ab2-5fb7fac.log). 1 vector a thread read 93.0 / 168.2 / 167.7 / 213.7
// us and was removed. Mode new at 8192 x 16384 read 138.9 against 141.0 us
// (fwd-ab2) but 134.3 against 131.9 at 16384 x 8192 (fwd-ab) and 89.9 against
// 91.3 % of C at 8192 x 16384 in c1a3bfe's bench: old stays the default.
int fwd_vectors_per_thread(int64_t nvec) {
  const int i = env_choice("LIGER_CPP_RMS_FWD_V", {"2", "4"});
  return i < 0 ? (nvec <= 128 ? 2 : kMaxV) : 2 << i;
}
// Whether the 4-vector, mode-old plain forward runs its register-capped build
// (rms_fwd_cached's REGCAP = kFwdRegCap; where a block has at most 512
// threads): LIGER_CPP_RMS_FWD_REGS=none|40 (read on every call); unset,
// `by_default`, which the caller sets for blocks of 512 threads (bf16
// hidden 16K: three rows a SM instead of two) where y has x's width, i.e.
// where the capped build does not spill (ptxas: 0 bytes; 4-12 bytes when
// 16-bit x writes fp32 y); uncapped otherwise. Kernel times, bf16 on the
// H200, uncapped -> 40 (-> 32, which spilled 40-76 bytes and was removed) at
// 8192 x 16384 / 16384 x 8192 / 32768 x 4096 / 65536 x 2048: 141.1 -> 132.5
// (150.6), 132.4 -> 131.7 (149.3), 131.5 -> 131.5 (149.2), 129.5 -> 129.5
// (149.5) us (2026-12-01-h200-norm-breakdown-fwd-2pass-l1-1fa6b98.log); but
// in the bench (two rounds, rms_norm-fwd-regs-ab-cee3049) 40 registers won
// only at 16K (93.1 / 93.5 against 90.9 % of C) and lost at 2K and 8K (95.2 /
// 94.9 against 95.8 / 95.4, 93.6 / 93.7 against 94.6 / 94.6; 4K even), where
// 4 or more rows already share an SM.
bool fwd_reg_capped(bool by_default) {
  static_assert(kFwdRegCap == 40, "the knob's value names the cap");
  const int i = env_choice("LIGER_CPP_RMS_FWD_REGS", {"none", "40"});
  return i < 0 ? by_default : i == 1;
}
int fwd_default_rows_per_block(int64_t nvec, int tx) { return nvec <= 128 ? std::max(1, 128 / tx) : 1; }

FwdMode fwd_mode(bool add) {
  switch (env_choice(add ? "LIGER_CPP_RMS_ADD_FWD" : "LIGER_CPP_RMS_FWD", {"old", "pack", "new"})) {
    case 0:
      return kFwdOld;
    case 1:
      return kFwdPack;
    case 2:
      return kFwdNew;
    default:
      return add ? kFwdNew : kFwdOld;
  }
}

// Rows in flight per block in rms_bwd_tma: LIGER_CPP_RMS_TMA_STAGES=2|3|4|6|8
// (read on every call, for A/B measurements), default 4 (6 measured 0.3-0.7
// points lower at bf16 hidden 1K-8K: rms_norm-tma-0686c5e).
int tma_stages() {
  static constexpr int kChoices[] = {2, 3, 4, 6, 8};
  static_assert(kChoices[4] <= kTmaMaxStages, "an mbarrier per stage");
  const int i = env_choice("LIGER_CPP_RMS_TMA_STAGES", {"2", "3", "4", "6", "8"});
  return i < 0 ? 4 : kChoices[i];
}

// A launch of rms_bwd_tma: threads a block (the row's vectors
// rounded up to a warp), rows in flight a block, dynamic shared memory, and
// persistent blocks (at most one per row).
struct TmaShape {
  int threads = 0, stages = 0;
  size_t smem = 0;
  int64_t grid = 0;
};

// Plans a TMA row kernel for rows of nvec vectors whose operands take
// `region` bytes of a stage; false when it does not apply: rows outside
// kTmaMinVec..1024 vectors, no sm_90 code for this device, or no block fits.
// The caller has checked that every row of every operand is 16-byte aligned.
template <typename K>
bool plan_tma(K* kern, int64_t nvec, int64_t rows, size_t region, int sm_count, TmaShape& t,
              size_t extra_per_thread = 0) {
  t.stages = tma_stages();  // first: a bad value is an error on any device
  if (nvec < kTmaMinVec || nvec > 1024 || sm_count < 1) return false;
  const void* f = reinterpret_cast<const void*>(kern);
  if (binary_version(f) < 90) return false;
  t.threads = static_cast<int>(ceil_div(nvec, 32) * 32);
  t.smem = region * t.stages + extra_per_thread * t.threads;
  // Nothing but the weights goes through L1: the largest shared-memory carveout.
  const int per_sm = pipe_blocks_per_sm(kern, t.threads, t.smem, true);
  if (per_sm < 1) return false;
  t.grid = std::min<int64_t>(rows, static_cast<int64_t>(sm_count) * per_sm);
  return true;
}

template <typename F>
cudaError_t dispatch_types(DType xd, DType wd, DType yd, F&& f) {
  return dispatch_dtype(xd, [&](auto xt) {
    return dispatch_dtype(wd, [&](auto wt) {
      return dispatch_dtype(yd, [&](auto yt) {
        using T = decltype(xt);
        using WT = decltype(wt);
        using OT = decltype(yt);
        if constexpr (valid_types<T, WT, OT>()) {
          return f(T{}, WT{}, OT{});
        } else {
          return cudaErrorInvalidValue;
        }
      });
    });
  });
}

// Where the cached backward keeps its dW partials. Registers cannot hold them
// for 1024-thread rows (64 registers a thread); otherwise registers are the
// default (measured faster at hidden 2K-16K on the H200).
// LIGER_CPP_RMS_DW=smem|regs overrides it, for A/B measurements.
bool bwd_dw_in_smem(int tx) {
  if (tx == 1024) return true;
  return env_choice("LIGER_CPP_RMS_DW", {"smem", "regs"}) == 0;
}

size_t bwd_smem_bytes(const Plan& p, bool want_dw) {
  if (!want_dw) return 0;
  const size_t region = static_cast<size_t>(p.tx) * kMaxV * p.vec * sizeof(float);
  return p.dw_smem ? region * p.ty : region;
}

template <typename T, typename WT, typename OT, bool DS>
auto bwd_kernel(const Plan& p) {
  constexpr int full = 16 / sizeof(T);
  if (p.tx == 1024) return &rms_bwd_cached<T, WT, OT, full, kMaxV, true, true, DS>;
  return p.dw_smem ? &rms_bwd_cached<T, WT, OT, full, kMaxV, true, false, DS>
                   : &rms_bwd_cached<T, WT, OT, full, kMaxV, false, false, DS>;
}

// The cached backward kernel for p, with the FusedAddRMSNorm ds_out path (DS)
// when the call has a residual gradient.
template <typename T, typename WT, typename OT>
auto bwd_kernel(const Plan& p, bool ds) {
  return ds ? bwd_kernel<T, WT, OT, true>(p) : bwd_kernel<T, WT, OT, false>(p);
}

// Which backward kernel runs rows that fit the cached kernels. Read on every
// call (one getenv per launch), so that benchmarks can A/B the kernels in one
// process and the tests can run each of them:
// The default is reg: on the H200 (bf16 fwd+bwd) 81.4 % of C against 77.8 % for
// async and 63.1 % for old at 16384 x 4096, 88.7 / 85.4 / 73.2 % at 131072 x 1024
// (benchmarks/results/2026-11-30-h200-rms_norm-9f9f3e6.log).
//   LIGER_CPP_RMS_BWD=async: rms_bwd_pipe with kPipeStages - 1 rows
//     fetched ahead by cp.async into shared memory (registers stay at 64, so
//     32 warps per SM, and ~96 KiB per SM in flight at 16384 x 4096 bf16).
//   reg (default): rms_bwd_pipe fetching one row ahead into registers (64 registers;
//     fp32 dy with 16-bit x takes async: it spilled). FusedAddRMSNorm's ds_out is
//     loaded after the row's reduction, its latency exposed once per row.
//   regds: reg, with ds_out also fetched one row ahead (differs from reg only
//     for FusedAddRMSNorm with a residual gradient; not measured yet).
//   old: rms_bwd_cached, 4 vectors per thread, 128 registers, 16 warps per SM
//     (measured latency-bound at 49 % of DRAM bandwidth on the H200).
//   tma: rms_bwd_tma, x and dy rows brought into shared memory by TMA bulk
//     copies, where it runs (sm_90 code, 16-byte aligned rows of
//     kTmaMinVec..1024 vectors, a block fits, no residual gradient);
//     elsewhere as unset (rows above 1024 vectors take the cluster kernel).
//   unset: tma for rows of kTmaAutoMinVec..1024 vectors without a residual
//     gradient, else reg (async with one). fwd+bwd with tma against reg at
//     bf16: 82.3 / 89.1 / 89.4 / 87.4 % of C against 80.5 / 87.6 / 86.6 /
//     87.1 % at 16384x4096 / 65536x2048 / 32768x4096 / 16384x8192, but
//     86.9 % against 88.9 % at 131072x1024 (rms_norm-tma-0686c5e): hence
//     above 128 vectors (1024 bf16 columns). Between 128 and 256 vectors reg
//     runs next_pow2(nvec) threads a row, idle lanes included: at 87381x1536
//     (192 vectors) fwd+bwd 75.8 % for reg against 88.4 % for tma
//     (2026-12-01-h200-norm-breakdown-1536-cl-cb6f610.log).
// rms_bwd_pipe keeps one vector per thread (MAXV = 1: more spills at 64
// registers), so rows above 1024 vectors (8192 bf16 or 4096 fp32 columns)
// take rms_bwd_cluster on sm_90 (see bwd_wide_cluster) and rms_bwd_cached
// elsewhere.
enum class BwdKind { kOld, kReg, kAsync, kRegDs, kCluster, kTma, kAuto };
constexpr int64_t kTmaAutoMinVec = 129;
constexpr int kPipeStages = 4;

// FusedAddRMSNorm with a residual gradient (ds) defaults to async instead:
// 90.0 % of C fwd+bwd against 87.0 % for reg and 82.0 % for regds at 16384 x
// 4096 bf16 (benchmarks/results/2026-11-30-h200-fused_add_rms_norm-5d1f57d.log):
// a third operand per row leaves reg's one row ahead too few bytes in flight.
BwdKind bwd_default(bool ds) { return ds ? BwdKind::kAsync : BwdKind::kAuto; }
BwdKind bwd_kind(bool ds) {
  switch (env_choice("LIGER_CPP_RMS_BWD", {"old", "async", "regds", "reg", "tma"})) {
    case 0:
      return BwdKind::kOld;
    case 1:
      return BwdKind::kAsync;
    case 2:
      return BwdKind::kRegDs;
    case 3:
      return BwdKind::kReg;
    case 4:
      return BwdKind::kTma;
    default:
      return bwd_default(ds);
  }
}

struct BwdPlan : Plan {
  BwdKind kind = BwdKind::kOld;
  size_t smem = 0;
  int cl = 0;               // kCluster: blocks per cluster (p.tx threads each; p.grid clusters)
  int stages = 0;           // kTma: rows in flight a block
  int tma_rows = 1;         // kTma: rows a stage (rms_bwd_tma's R)
  int rows_a_message = 1;   // kCluster: R
  int cluster_maxt = 1024;  // kCluster: the rms_bwd_cluster build (its MAXT)
};

// LIGER_CPP_RMS_TMA_PAIRS=on|off (read on every call; default on): rows of
// 513..768 threads take rms_bwd_tma's two-rows-a-stage build (R = 2):
// backward 239.6 -> 230.8 us at 26214x5120, 223.5 -> 216.4 at 21845x6144
// bf16 (2026-12-01-h200-norm-breakdown-pairs-aca6894.log).
bool tma_pairs() { return env_choice("LIGER_CPP_RMS_TMA_PAIRS", {"off", "on"}) != 0; }

template <typename T, typename WT, typename OT>
auto tma_kernel(int rows_a_stage) {
  constexpr int full = 16 / sizeof(T);
  return rows_a_stage == 2 ? &rms_bwd_tma<T, WT, OT, full, 768, 2> : &rms_bwd_tma<T, WT, OT, full>;
}

// Plans rms_bwd_tma (see plan_tma; one dW partial row per block); false when
// it does not apply (then the default backward runs). Plain RMSNorm only: no
// residual gradient.
template <typename T, typename WT, typename OT>
bool plan_bwd_tma(const RmsNormBwdArgs& a, int sm_count, BwdPlan& p) {
  if (a.ds_out != nullptr) return false;
  const size_t region = tma_row_region(a.cols * static_cast<int64_t>(sizeof(T))) +
                        tma_row_region(a.cols * static_cast<int64_t>(sizeof(OT)));
  TmaShape t;
  constexpr int full = 16 / sizeof(T);
  const int64_t threads = ceil_div(a.cols / p.vec, 32) * 32;
  const bool pairs = tma_pairs() && threads > 512 && threads <= 768;  // the knob read first
  // A thread's weights as floats after the stages; a stage holds tma_rows
  // rows. Where two rows a stage do not fit in shared memory (fp32 dy with
  // 16-bit x, as under autocast, at bf16 hidden 5120 / 6144: 240 / 288 KiB in
  // 4 stages), one row a stage, the build measured before pairs.
  auto plan = [&](int rows_a_stage) {
    p.tma_rows = rows_a_stage;
    return plan_tma(tma_kernel<T, WT, OT>(rows_a_stage), a.cols / p.vec, ceil_div(a.rows, rows_a_stage),
                    region * rows_a_stage, sm_count, t, full * sizeof(float));
  };
  if (!(pairs && plan(2)) && !plan(1)) return false;
  p.kind = BwdKind::kTma;
  p.cached = true;
  p.tx = t.threads;
  p.ty = 1;
  p.stages = t.stages;
  p.smem = t.smem;
  p.grid = t.grid;
  p.ws_floats = a.dw != nullptr ? p.grid * a.cols : 0;
  return true;
}

template <typename T, typename WT, typename OT, int STAGES, bool DSA = false>
auto pipe_kernel(bool ds) {
  constexpr int full = 16 / sizeof(T);
  return ds ? &rms_bwd_pipe<T, WT, OT, full, 1, STAGES, true, DSA>
            : &rms_bwd_pipe<T, WT, OT, full, 1, STAGES, false>;
}

// fp32 dy with 16-bit x (32-byte dy vectors) spills in the register variant
// with DS, so that type combination always fetches with cp.async.
template <typename T, typename WT, typename OT>
auto pipe_kernel(BwdKind k, bool ds) {
  if constexpr (sizeof(OT) > sizeof(T)) {
    return pipe_kernel<T, WT, OT, kPipeStages>(ds);
  } else {
    if (k == BwdKind::kRegDs) return pipe_kernel<T, WT, OT, 0, true>(ds);
    return k == BwdKind::kReg ? pipe_kernel<T, WT, OT, 0>(ds) : pipe_kernel<T, WT, OT, kPipeStages>(ds);
  }
}

// Plans rms_bwd_pipe (p.tx threads a row, p.ty rows a block, persistent grid);
// false when it does not fit (then rms_bwd_cached runs).
template <typename T, typename WT, typename OT>
bool plan_pipe(const RmsNormBwdArgs& a, int sm_count, BwdKind kind, BwdPlan& p) {
  const int64_t nvec = a.cols / p.vec;
  if (nvec > 1024) return false;
  if (sizeof(OT) > sizeof(T)) kind = BwdKind::kAsync;  // as pipe_kernel() picks it
  p.cached = true;
  p.tx = next_pow2(nvec);
  p.ty = std::max(1, 512 / p.tx);  // <= 8 groups when they synchronise (tx >= 64)
  const bool want_dw = a.dw != nullptr;
  const size_t dw_bytes = (want_dw && p.ty > 1) ? static_cast<size_t>(p.tx) * p.vec * sizeof(float) : 0;
  size_t pipe_bytes = 0;
  if (kind == BwdKind::kAsync) {
    const size_t chunks = (p.vec * sizeof(T) + p.vec * sizeof(OT) + (a.ds_out ? p.vec * sizeof(T) : 0)) / 16;
    pipe_bytes = static_cast<size_t>(kPipeStages) * p.ty * p.tx * chunks * 16;
  }
  p.smem = std::max(dw_bytes, pipe_bytes);
  auto* kern = pipe_kernel<T, WT, OT>(kind, a.ds_out != nullptr);
  // Too much shared memory, or no block fits: rms_bwd_cached runs.
  const int per_sm = pipe_blocks_per_sm(kern, p.tx * p.ty, p.smem, kind == BwdKind::kAsync);
  if (per_sm < 1) return false;
  p.kind = kind;
  p.grid = std::max<int64_t>(
      1, std::min<int64_t>(ceil_div(a.rows, p.ty), static_cast<int64_t>(sm_count) * per_sm));
  p.ws_floats = want_dw ? p.grid * a.cols : 0;
  return true;
}

// Rows above 1024 vectors (LIGER_CPP_RMS_BWD_WIDE, read on every call):
//   cluster (default where it runs): rms_bwd_cluster, sm_90 code only.
//   old: rms_bwd_cached (4 vectors a thread, spilled; ~50 % of C at
//     4096 x 32768 bf16 fwd+bwd on the H200).
// LIGER_CPP_RMS_BWD=old also selects old here (old means the previous kernel
// at every width). An unknown value is an error.
// rms_bwd_tma with two vectors a thread (rows up to 2048 vectors; 2 stages of
// 64 KiB fit beside the float weights, 40-200 bytes spilled) read 77.8 against
// 81.0 % for cluster at 8192 x 16384 bf16 fwd+bwd and was removed
// (2026-11-30-h200-rms_norm-wide-07d511f.log, the wide=tma row). The cluster
// backward with each block's row slices brought into 4 shared-memory stages
// by TMA (no registers for the rows ahead; a stage refilled once the next
// row's exchange starts) ran slower than cluster: 245.0 / 269.7 / 292.7
// against 234.7 / 260.2 / 275.1 us at 8192 x 16384 / 4096 x 32768 /
// 2048 x 65536 bf16 (2026-12-01-h200-norm-breakdown-wide-9715a5e.log), and
// was removed: the per-row cluster exchange, not the loads in flight, sets
// its pace.
bool bwd_wide_cluster() { return env_choice("LIGER_CPP_RMS_BWD_WIDE", {"cluster", "old"}) != 1; }

// Threads per cluster block: LIGER_CPP_RMS_WIDE_TX=512|1024 forces the
// largest block size tried (A/B measurements); 0 = choose (see plan_cluster).
int wide_tx_forced() {
  const int i = env_choice("LIGER_CPP_RMS_WIDE_TX", {"512", "1024"});
  return i < 0 ? 0 : (i == 0 ? 512 : 1024);
}

// rms_bwd_cluster's rows a message: LIGER_CPP_RMS_BWD_ROWS=1|2 (read on
// every call); unset: 2 for clusters of two blocks, 1 for more. Pairs cost 4
// registers a row each of x and dy more (64 registers, 32 bytes spilled): at
// 8192 x 16384 bf16 (clusters of 2) backward 227.1 against 230.4 us, at
// 2048 x 65536 (8) 265.0 against 252.6 us, at 4096 x 32768 (4) even
// (2026-12-01-h200-norm-breakdown-xchg-9427db8.log).
int cluster_rows(int cl) {
  const int i = env_choice("LIGER_CPP_RMS_BWD_ROWS", {"1", "2"});
  return i < 0 ? (cl <= 2 ? 2 : 1) : i + 1;
}

template <typename T, typename WT, typename OT>
auto cluster_kernel(bool ds, int rows_a_message, int maxt = 1024) {
  constexpr int full = 16 / sizeof(T);
  auto pick = [&](auto ds_c) {
    constexpr bool DS = decltype(ds_c)::value;
    if (maxt == 768 && rows_a_message == 2) return &rms_bwd_cluster<T, WT, OT, full, DS, 2, 768>;
    return rows_a_message == 2 ? &rms_bwd_cluster<T, WT, OT, full, DS, 2>
                               : &rms_bwd_cluster<T, WT, OT, full, DS, 1>;
  };
  return ds ? pick(std::true_type{}) : pick(std::false_type{});
}

// LIGER_CPP_RMS_CLUSTER_REGS=64|85 (read on every call; default 85): 85
// runs blocks of 513..768 threads in rms_bwd_cluster's MAXT = 768 build
// (rows in pairs; 80 registers in practice, see the kernel).
// The same occupancy (one block a SM), so the shape picked stays; backward
// 243.4 -> 226.1 us at 13107x10240 bf16, 236.3 -> 212.0 at 10922x12288
// (2026-12-01-h200-norm-breakdown-regs85-89d8b66.log).
bool cluster_wide_regs() { return env_choice("LIGER_CPP_RMS_CLUSTER_REGS", {"64", "85"}) != 0; }

// A cluster launch of rms_bwd_cluster or rms_fwd_cluster: `cl` blocks of
// `tx` threads per cluster, `grid` clusters.
struct ClusterShape {
  int tx = 0, cl = 0;
  int64_t grid = 0;
};

// Chooses the cluster launch of `kern` for rows of nvec vectors: CL =
// ceil(nvec / TX) blocks of (about) nvec / CL threads (rounded up to a warp),
// for TX = 1024 and 512; the one with more threads resident (ties: fewer
// blocks per cluster, a cheaper barrier). 1024 threads at 64 registers fill an
// SM's register file; 512 give two blocks an SM, so a cluster of 8 can sit on
// 4 SMs (finer packing into the GPCs). At most min(rows, resident) clusters
// (persistent). false when none applies: rows of at most 1024 or more than
// 8 * 1024 vectors, no sm_90 code, or no cluster fits.
template <typename K>
bool pick_cluster_shape(K* kern, int64_t nvec, int64_t rows, ClusterShape& c) {
  if (nvec <= 1024 || nvec > static_cast<int64_t>(kWideMaxCluster) * 1024) return false;
  const int forced = wide_tx_forced();
  // Clusters of a power-of-two size first: clusters of 3 (512 threads, two
  // blocks a SM) ran the backward at 56.2 / 53.0 % of C fwd+bwd at
  // 10922x12288 / 13107x10240 bf16, clusters of 2 (768 / 640 threads) at
  // 87.6 / 85.0 % (2026-12-01-h200-norm-breakdown-1536-cl-cb6f610.log).
  // More, smaller blocks lose too: 4 of 320 threads at 13107x10240 (three
  // a SM) 60.3 against 85.2 %, 4 of 384 at 10922x12288 54.0 against 87.4 %
  // (2026-12-01-h200-norm-breakdown-regs85-89d8b66.log).
  bool pow2_seen = false;
  for (int tx : {1024, 512}) {
    const int64_t cl = ceil_div(nvec, tx);
    if ((!forced || tx == forced) && cl <= kWideMaxCluster && (cl & (cl - 1)) == 0) pow2_seen = true;
  }
  int64_t best = 0;
  for (int tx : {1024, 512}) {
    if (forced && tx != forced) continue;
    const int64_t cl = ceil_div(nvec, tx);
    if (cl > kWideMaxCluster || (pow2_seen && (cl & (cl - 1)) != 0)) continue;
    const int threads = static_cast<int>(ceil_div(ceil_div(nvec, cl), 32) * 32);
    const int n = active_clusters(kern, threads, static_cast<int>(cl));
    const int64_t resident = static_cast<int64_t>(n) * cl * threads;
    if (resident > best) {
      best = resident;
      c.tx = threads;
      c.cl = static_cast<int>(cl);
      c.grid = std::min<int64_t>(rows, n);
    }
  }
  return best > 0;
}
// Plans rms_bwd_cluster (see pick_cluster_shape; one dW partial row per
// cluster); false when it does not apply (then rms_bwd_cached runs).
template <typename T, typename WT, typename OT>
bool plan_cluster(const RmsNormBwdArgs& a, BwdPlan& p) {
  ClusterShape c;
  const bool ds = a.ds_out != nullptr;
  if (!pick_cluster_shape(cluster_kernel<T, WT, OT>(ds, 1), a.cols / p.vec, a.rows, c)) return false;
  p.rows_a_message = cluster_rows(c.cl);
  // Pairs: the same shape (the kernels' registers and shared memory are the
  // same), at most one cluster a pair.
  if (p.rows_a_message == 2 &&
      !pick_cluster_shape(cluster_kernel<T, WT, OT>(ds, 2), a.cols / p.vec, ceil_div(a.rows, 2), c))
    return false;
  p.tx = c.tx;
  p.cl = c.cl;
  p.grid = c.grid;  // clusters; one partial row each
  // Only the pairs build spills at 64 registers: one row a message keeps
  // the 1024-thread build (one 768 instance fewer in this module, which
  // CUDA loads whole on the first call).
  p.cluster_maxt = cluster_wide_regs() && p.rows_a_message == 2 && c.tx > 512 && c.tx <= 768 ? 768 : 1024;
  p.cached = true;
  p.ty = 1;
  p.smem = 0;
  p.kind = BwdKind::kCluster;
  p.ws_floats = a.dw != nullptr ? p.grid * a.cols : 0;
  return true;
}

// Forward rows above 1024 vectors (LIGER_CPP_RMS_FWD_WIDE, read on every call;
// an unknown value is an error):
//   cluster (where it runs): rms_fwd_cluster, sm_90 code only, with the
//     block size of LIGER_CPP_RMS_WIDE_TX as the backward's.
//   old: rms_fwd_cached (up to 4096 vectors) or rms_fwd_generic, with the
//     variant LIGER_CPP_RMS_FWD / LIGER_CPP_RMS_ADD_FWD picks (those knobs
//     select among rms_fwd_cached's variants only: the cluster kernel always
//     stores packed and loads its weights once).
//   l2, l2x512: rms_fwd_generic without the shared-memory stash, in blocks of
//     256 (l2) or 512 threads: each block reduces a row, then reads it again
//     (from L2, where it just went through) for y. Many small blocks per SM
//     keep many rows' loads in flight.
//   l2hint: rms_fwd_l2hint (torch.compile's design, with L2 eviction hints;
//     FusedAddRMSNorm's forward and unaligned rows take old).
// The default (unset) is l2hint above 2048 vectors (bf16 hidden > 16K) and
// old up to there: fwd 89.7 / 75.5 % of C against 76.1 / 62.7 % for old at
// 4096 x 32768 / 2048 x 65536, but 82.2 against 89.7 % at 8192 x 16384 (bf16,
// benchmarks/results/2026-11-30-h200-rms_norm-wide-c27c711.log).
// The cluster forward as written keeps one row ahead in
// registers (16 KB of loads in flight per SM) and measured slower than old:
// 65.1 / 57.1 / 49.5 % of C against 90.2 / 76.5 / 62.6 % at 8192 x 16384 /
// 4096 x 32768 / 2048 x 65536 bf16 (benchmarks/results/
// 2026-11-30-h200-rms_norm-quick-9247f64.log).
enum FwdWide {
  kFwdWideAuto = -1,
  kFwdWideCluster = 0,
  kFwdWideOld = 1,
  kFwdWideL2 = 2,
  kFwdWideL2x512 = 3,
  kFwdWideL2Hint = 4
};
// LIGER_CPP_RMS_FWD_L1HINT=on|off (read on every call): rms_fwd_l2hint's
// loads with L1 eviction priorities as well. Default: on for rows above
// 64 KiB, where it measured faster: bf16 2048x65536 fwd 80.9 / 80.9 against
// 75.4 / 75.5 % of C, fwd+bwd 77.3 / 77.3 against 75.4 / 75.4; at 4096x32768
// it lost (fwd 88.9 / 88.6 against 90.1 / 90.1; benchmarks/results/
// 2026-12-01-h200-rms_norm-wide-l1-{a,b}-235907a.log).
bool fwd_l2hint_l1(int64_t row_bytes) {
  const int i = env_choice("LIGER_CPP_RMS_FWD_L1HINT", {"off", "on"});
  return i < 0 ? row_bytes > 65536 : i == 1;
}

// LIGER_CPP_RMS_FWD_FIXED=on|off|t256|t512|gen (read on every call; default on:
// see rms_norm_fwd_fixed.h).
FwdFixed fwd_fixed() {
  const int i = env_choice("LIGER_CPP_RMS_FWD_FIXED", {"off", "on", "t256", "t512", "gen"});
  return i < 0 ? FwdFixed::kOn : static_cast<FwdFixed>(i);
}

FwdWide fwd_wide_mode() {
  const int i = env_choice("LIGER_CPP_RMS_FWD_WIDE", {"cluster", "old", "l2", "l2x512", "l2hint"});
  return static_cast<FwdWide>(i);  // -1 (unset): kFwdWideAuto
}

template <typename T, typename WT, typename OT>
BwdPlan plan_bwd(const RmsNormBwdArgs& a, int sm_count) {
  BwdPlan p;
  const int full = 16 / static_cast<int>(sizeof(T));
  const bool aligned = all_aligned(
      full, a.cols, {a.x_row_stride, a.dy_row_stride, a.dx_row_stride, a.ds_out ? a.ds_out_row_stride : 0},
      {{a.x, sizeof(T)}, {a.dy, sizeof(OT)}, {a.dx, sizeof(T)}, {a.w, sizeof(WT)}, {a.ds_out, sizeof(T)}});
  p.vec = aligned ? full : 1;
  const bool want_dw = a.dw != nullptr;
  BwdKind kind = bwd_kind(a.ds_out != nullptr);
  if (kind == BwdKind::kTma || kind == BwdKind::kAuto) {
    const int64_t min_vec = kind == BwdKind::kTma ? kTmaMinVec : kTmaAutoMinVec;
    if (aligned && a.cols / p.vec >= min_vec && plan_bwd_tma<T, WT, OT>(a, sm_count, p)) return p;
    kind = a.ds_out != nullptr ? BwdKind::kAsync : BwdKind::kReg;
  }
  if (aligned && kind != BwdKind::kOld && plan_pipe<T, WT, OT>(a, sm_count, kind, p)) return p;
  if (aligned && kind != BwdKind::kOld && bwd_wide_cluster() && plan_cluster<T, WT, OT>(a, p)) return p;
  p.kind = BwdKind::kOld;
  if (aligned && pick_cached(a.cols / p.vec, p)) {
    p.dw_smem = bwd_dw_in_smem(p.tx);
    const size_t smem = bwd_smem_bytes(p, want_dw);
    p.smem = smem;
    auto* kern = bwd_kernel<T, WT, OT>(p, a.ds_out != nullptr);
    // Above 48 KiB a kernel must opt in to dynamic shared memory (sm_blocks
    // raises the limit before its occupancy query).
    const int per_sm = sm_blocks(reinterpret_cast<const void*>(kern), p.tx * p.ty, smem);
    p.grid = std::min<int64_t>(ceil_div(a.rows, p.ty), static_cast<int64_t>(sm_count) * per_sm);
    p.grid = std::max<int64_t>(p.grid, 1);
    p.ws_floats = want_dw ? p.grid * a.cols : 0;
  } else {
    p.cached = false;
    const int64_t col_blocks = ceil_div(a.cols / p.vec, 256);
    p.grid = std::max<int64_t>(1, std::min<int64_t>(a.rows, ceil_div(4LL * sm_count, col_blocks)));
    p.grid = std::min<int64_t>(p.grid, 65535);
    p.ws_floats = want_dw ? p.grid * a.cols : 0;
  }
  return p;
}

}  // namespace

// ---------------------------------------------------------------------------

cudaError_t rms_norm_fwd(const RmsNormFwdArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  if (cudaError_t err; rms_norm_fwd_fixed(a, fwd_fixed(), stream, &err)) return err;
  const bool llama = a.casting == RmsCasting::kLlama;
  return dispatch_types(a.x_dtype, a.w ? a.w_dtype : a.x_dtype, a.y_dtype, [&](auto xt, auto wt, auto yt) {
    using T = decltype(xt);
    using WT = decltype(wt);
    using OT = decltype(yt);
    const T* x = static_cast<const T*>(a.x);
    const WT* w = static_cast<const WT*>(a.w);
    OT* y = static_cast<OT*>(a.y);
    constexpr int full = 16 / sizeof(T);
    const T* res = static_cast<const T*>(a.res);
    T* sum = static_cast<T*>(a.s);
    const bool add = res != nullptr;
    const bool aligned = all_aligned(
        full, a.cols, {a.x_row_stride, add ? a.res_row_stride : 0},
        {{a.x, sizeof(T)}, {a.y, sizeof(OT)}, {a.w, sizeof(WT)}, {a.res, sizeof(T)}, {a.s, sizeof(T)}});
    auto launch = [&](auto add_c) -> cudaError_t {
      constexpr bool ADD = decltype(add_c)::value;
      ClusterShape c;
      auto* ckern = &rms_fwd_cluster<T, WT, OT, full, ADD>;
      FwdWide wide = a.cols / full > 1024 ? fwd_wide_mode() : kFwdWideOld;
      if (wide == kFwdWideAuto) wide = a.cols / full > 2048 ? kFwdWideL2Hint : kFwdWideOld;
      if constexpr (!ADD) {
        if (wide == kFwdWideL2Hint && aligned && a.cols / full <= INT32_MAX) {  // int vector indices
          auto* kern = fwd_l2hint_l1(a.cols * static_cast<int64_t>(sizeof(T)))
                           ? &rms_fwd_l2hint<T, WT, OT, full, true>
                           : &rms_fwd_l2hint<T, WT, OT, full>;
          kern<<<a.rows, 1024, 0, stream>>>(x, a.x_row_stride, w, y, a.rstd, a.cols, a.eps, a.offset, llama);
          return cudaGetLastError();
        }
      }
      if (wide == kFwdWideL2 || wide == kFwdWideL2x512) {
        const unsigned tx = wide == kFwdWideL2 ? 256 : 512;
        LIGER_DISPATCH_VEC(aligned ? full : 1, full, {
          rms_fwd_generic<T, WT, OT, VEC, false, ADD><<<a.rows, tx, 0, stream>>>(
              x, a.x_row_stride, res, a.res_row_stride, sum, w, y, a.rstd, a.cols, a.eps, a.offset, llama);
        })
        return cudaGetLastError();
      }
      if (aligned && wide == kFwdWideCluster && pick_cluster_shape(ckern, a.cols / full, a.rows, c)) {
        cudaLaunchAttribute attr[1];
        cudaLaunchConfig_t cfg = cluster_launch_config(c.tx, c.cl, 0, stream, attr);
        cfg.gridDim = dim3(static_cast<unsigned>(c.grid * c.cl));
        return cudaLaunchKernelEx(&cfg, ckern, x, a.x_row_stride, res, a.res_row_stride, sum, w, y, a.rstd,
                                  a.rows, a.cols, a.eps, a.offset, llama);
      }
      Plan p;
      const FwdMode mode = fwd_mode(ADD);
      // Two vectors a thread (plain RMSNorm, modes old and new): a plan with
      // more threads a row, or kMaxV's where a row needs more than 1024.
      int maxv = !ADD && mode != kFwdPack ? fwd_vectors_per_thread(a.cols / full) : kMaxV;
      if (aligned && maxv != kMaxV && !pick_cached(a.cols / full, p, maxv)) maxv = kMaxV;
      if (aligned && (maxv != kMaxV || pick_cached(a.cols / full, p))) {
        if constexpr (!ADD) p.ty = fwd_default_rows_per_block(a.cols / full, p.tx);
        p.ty = fwd_rows_per_block(ADD ? "LIGER_CPP_RMS_ADD_FWD_TY" : "LIGER_CPP_RMS_FWD_TY", p);
        const dim3 block(p.tx, p.ty);
        const int64_t grid = ceil_div(a.rows, p.ty);
        auto launch_mode = [&](auto mode_c, auto maxv_c, auto cap_c) {
          rms_fwd_cached<T, WT, OT, full, decltype(maxv_c)::value, ADD, decltype(mode_c)::value,
                         decltype(cap_c)::value>
              <<<grid, block, 0, stream>>>(x, a.x_row_stride, res, a.res_row_stride, sum, w, y, a.rstd,
                                           a.rows, a.cols, a.eps, a.offset, llama);
        };
        using NoCap = std::integral_constant<int, 0>;
        const int threads = p.tx * p.ty;
        const bool cap_knob = fwd_reg_capped(sizeof(OT) == sizeof(T) && threads > 256);  // read on every call
        const bool capped = !ADD && mode == kFwdOld && maxv == kMaxV && threads <= 512 && cap_knob;
        using V2 = std::integral_constant<int, 2>;
        using V4 = std::integral_constant<int, kMaxV>;
        using Old = std::integral_constant<int, kFwdOld>;
        using New = std::integral_constant<int, kFwdNew>;
        switch (mode) {
          case kFwdOld:
            if constexpr (!ADD) {
              if (maxv == 2) {
                launch_mode(Old{}, V2{}, NoCap{});
                break;
              }
              if (capped) {
                launch_mode(Old{}, V4{}, std::integral_constant<int, kFwdRegCap>{});
                break;
              }
            }
            launch_mode(Old{}, V4{}, NoCap{});
            break;
          case kFwdPack:
            launch_mode(std::integral_constant<int, kFwdPack>{}, V4{}, NoCap{});
            break;
          default:
            if constexpr (!ADD) {
              if (maxv == 2) {
                launch_mode(New{}, V2{}, NoCap{});
                break;
              }
            }
            launch_mode(New{}, V4{}, NoCap{});
        }
      } else {
        const int vec = aligned ? full : 1;
        const int64_t row_bytes = a.cols * static_cast<int64_t>(sizeof(T));
        const bool stash = row_bytes <= kMaxStashBytes;
        const size_t smem = stash ? static_cast<size_t>(row_bytes) : 0;
        LIGER_DISPATCH_VEC(vec, full, {
          if (stash) {
            auto* kern = &rms_fwd_generic<T, WT, OT, VEC, true, ADD>;
            // A failed raise shows up as the launch's error.
            raise_max_dynamic_smem(reinterpret_cast<const void*>(kern), smem);
            kern<<<a.rows, 1024, smem, stream>>>(x, a.x_row_stride, res, a.res_row_stride, sum, w, y, a.rstd,
                                                 a.cols, a.eps, a.offset, llama);
          } else {
            rms_fwd_generic<T, WT, OT, VEC, false, ADD><<<a.rows, 1024, 0, stream>>>(
                x, a.x_row_stride, res, a.res_row_stride, sum, w, y, a.rstd, a.cols, a.eps, a.offset, llama);
          }
        })
      }
      return cudaGetLastError();
    };
    return add ? launch(std::true_type{}) : launch(std::false_type{});
  });
}

int64_t rms_norm_bwd_workspace_floats(const RmsNormBwdArgs& a, int sm_count) {
  int64_t n = 0;
  dispatch_types(a.x_dtype, a.w ? a.w_dtype : a.x_dtype, a.y_dtype, [&](auto xt, auto wt, auto yt) {
    n = plan_bwd<decltype(xt), decltype(wt), decltype(yt)>(a, sm_count).ws_floats;
    return cudaSuccess;
  });
  return n;
}

cudaError_t rms_norm_bwd(const RmsNormBwdArgs& a, int sm_count, cudaStream_t stream) {
  if (a.rows == 0) {
    if (a.dw) {
      const int64_t bytes = a.cols * dtype_size(a.w_dtype);
      return cudaMemsetAsync(a.dw, 0, bytes, stream);
    }
    return cudaSuccess;
  }
  const bool llama = a.casting == RmsCasting::kLlama;
  return dispatch_types(a.x_dtype, a.w ? a.w_dtype : a.x_dtype, a.y_dtype, [&](auto xt, auto wt, auto yt) {
    using T = decltype(xt);
    using WT = decltype(wt);
    using OT = decltype(yt);
    const BwdPlan p = plan_bwd<T, WT, OT>(a, sm_count);
    const OT* dy = static_cast<const OT*>(a.dy);
    const T* x = static_cast<const T*>(a.x);
    const WT* w = static_cast<const WT*>(a.w);
    T* dx = static_cast<T*>(a.dx);
    const T* ds_out = static_cast<const T*>(a.ds_out);
    float* partial = a.dw ? a.workspace : nullptr;
    constexpr int full = 16 / sizeof(T);
    if (p.kind == BwdKind::kTma) {
      const cudaError_t err = launch_pdl(
          tma_kernel<T, WT, OT>(p.tma_rows), dim3(static_cast<unsigned>(p.grid)),
          dim3(static_cast<unsigned>(p.tx)), p.smem, stream, dy, a.dy_row_stride, x, a.x_row_stride, w,
          a.rstd, dx, a.dx_row_stride, partial, a.rows, a.cols, a.offset, llama, p.stages);
      if (err != cudaSuccess) return err;
    } else if (p.kind == BwdKind::kCluster) {
      const cudaError_t err = launch_cluster_pdl(
          cluster_kernel<T, WT, OT>(ds_out != nullptr, p.rows_a_message, p.cluster_maxt), p.grid * p.cl, p.tx,
          p.cl, 0, stream, dy, a.dy_row_stride, x, a.x_row_stride, w, a.rstd, ds_out, a.ds_out_row_stride, dx,
          a.dx_row_stride, partial, a.rows, a.cols, a.offset, llama);
      if (err != cudaSuccess) return err;
    } else if (p.cached && p.kind != BwdKind::kOld) {
      pipe_kernel<T, WT, OT>(p.kind, ds_out != nullptr)<<<p.grid, dim3(p.tx, p.ty), p.smem, stream>>>(
          dy, a.dy_row_stride, x, a.x_row_stride, w, a.rstd, ds_out, a.ds_out_row_stride, dx, a.dx_row_stride,
          partial, a.rows, a.cols, a.offset, llama);
    } else if (p.cached) {
      const dim3 block(p.tx, p.ty);
      const size_t smem = bwd_smem_bytes(p, partial != nullptr);
      bwd_kernel<T, WT, OT>(p, ds_out != nullptr)<<<p.grid, block, smem, stream>>>(
          dy, a.dy_row_stride, x, a.x_row_stride, w, a.rstd, ds_out, a.ds_out_row_stride, dx, a.dx_row_stride,
          partial, a.rows, a.cols, a.offset, llama);
    } else {
      LIGER_DISPATCH_VEC(p.vec, full, {
        if (partial) {  // dW first: an in-place dx below overwrites dy
          const dim3 grid(static_cast<unsigned>(ceil_div(a.cols / VEC, 256)), static_cast<unsigned>(p.grid));
          rms_bwd_dw_generic<T, OT, VEC><<<grid, 256, 0, stream>>>(dy, a.dy_row_stride, x, a.x_row_stride,
                                                                   a.rstd, partial, a.rows, a.cols, llama);
        }
        rms_bwd_dx_generic<T, WT, OT, VEC><<<a.rows, 512, 0, stream>>>(dy, a.dy_row_stride, x, a.x_row_stride,
                                                                       w, a.rstd, ds_out, a.ds_out_row_stride,
                                                                       dx, a.dx_row_stride, a.cols, a.offset);
      })
    }
    if (partial) {
      const cudaError_t err = launch_reduce_partials<WT>(partial, static_cast<WT*>(a.dw), nullptr, nullptr,
                                                         p.grid, a.cols, stream);
      if (err != cudaSuccess) return err;
    }
    return cudaGetLastError();
  });
}

}  // namespace liger_cpp::kernels
