// RMSNorm backward for rows of 1025..8192 16-byte vectors on sm_90
// (rms_bwd_cluster): each row split over a thread-block cluster whose blocks
// exchange their partial sums through distributed shared memory.
// docs/kernels/rms_norm.md.
#include "kernels/common/cluster.cuh"
#include "kernels/norm/norm_plan.h"
#include "kernels/rms_norm/rms_norm_impl.h"
#include "kernels/rms_norm/rms_norm_kernels.cuh"

namespace liger_cpp::kernels {
namespace {

// Backward for wide rows (sm_90): rows of more than 1024 vectors, which
// rms_bwd_pipe (one vector a thread, <= 1024 threads) cannot hold, are split
// over a thread-block cluster of CL blocks instead of giving each thread
// several vectors (rms_bwd_cached: 4 vectors a thread spilled 120-136 bytes
// under the 64-register cap of 1024 threads). Block `rank` owns vectors
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
// unneeded; a barrier a row measured slower, docs/kernels/rms_norm.md) and no
// memory fence: the st.async data is made visible by the mbarrier.
// At the end each block writes its columns of the cluster's partial row
// (partial[c][:]), finished by reduce_partials over the nclusters rows.
// dy and dx may alias (in place): the row fetched ahead is never the row
// being written, and rows belong to one cluster. ds_out may alias dx (each
// element is read by its thread before it is written).
// __launch_bounds__(1024, 1): 64 registers, so one 1024-thread block or two
// 512-thread blocks per SM (the host picks blockDim.x <= 1024, a multiple of 32).
using rms_norm_impl::kWideMaxCluster;                // portable cluster size
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

// The row-sum exchange of rms_bwd_cluster (the protocol: its comment). Message k carries R rows' warp sums:
// every warp's lane q < cl sends its R sums to block q, into red[k & 1][(rank * nwarps + warp) * R + i];
// bars[k & 1] completes when all `bytes` (nparts * R
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
// writes.
// R = 2: rows in pairs (unit u: rows 2u, 2u + 1), one message of two sums a
// pair (the plan: clusters of two blocks).
// MAXT = 768 (R = 2 only; the plan's build for blocks of 513..768 threads):
// those run one block a SM at 64 registers anyway (bf16 hidden 8208..12288 in
// clusters of two); at 768 ptxas allows 80 registers (65536 / 768, rounded
// down to its granularity): no spills with x, w and dy all bf16 (32 / 64 bytes
// at 64 registers, without / with ds_out), fewer elsewhere (fp16 8-28 against
// 64-148 bytes; fp32 dy 44-100 against 160-324). Measured on bf16 only
// (docs/kernels/rms_norm.md).
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
  auto weights = [&](float(&wf)[VEC]) { load_weight_floats<VEC>(w_smem + tx, 1024, true, wf); };
  const float inv_cols = 1.f / static_cast<float>(cols);
  float dw_acc[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) dw_acc[j] = 0.f;
  // Volatile loads: issued where written (before the mbarrier wait), not sunk
  // next to their first use in the next iteration.
  auto fetch = [&](int64_t u, XV(&xd)[R], GV(&gd)[R], float(&rd)[R]) {
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

// The build for (ds, rows a message, max threads): 768 only with rows in pairs.
template <typename T, typename WT, typename OT>
auto cluster_kernel(bool ds, int rows_a_message, int max_threads) {
  constexpr int full = 16 / sizeof(T);
  auto pick = [&](auto ds_c) {
    constexpr bool DS = decltype(ds_c)::value;
    if (max_threads == 768 && rows_a_message == 2) return &rms_bwd_cluster<T, WT, OT, full, DS, 2, 768>;
    return rows_a_message == 2 ? &rms_bwd_cluster<T, WT, OT, full, DS, 2>
                               : &rms_bwd_cluster<T, WT, OT, full, DS, 1>;
  };
  return ds ? pick(std::true_type{}) : pick(std::false_type{});
}

}  // namespace

namespace rms_norm_impl {

const void* bwd_cluster_kernel(DType x, DType w, DType y, bool ds, int rows_a_message, int max_threads) {
  return dispatch_types(x, w, y, static_cast<const void*>(nullptr), [&](auto xt, auto wt, auto yt) {
    return reinterpret_cast<const void*>(
        cluster_kernel<decltype(xt), decltype(wt), decltype(yt)>(ds, rows_a_message, max_threads));
  });
}

cudaError_t launch_bwd_cluster(const RmsNormBwdArgs& a, const RmsNormBwdPlan& p, float* partial,
                               cudaStream_t stream) {
  const bool llama = a.casting == RmsCasting::kLlama;
  return dispatch_types(a.x_dtype, a.w ? a.w_dtype : a.x_dtype, a.y_dtype, cudaErrorInvalidValue,
                        [&](auto xt, auto wt, auto yt) {
                          using T = decltype(xt);
                          using WT = decltype(wt);
                          using OT = decltype(yt);
                          const T* ds_out = static_cast<const T*>(a.ds_out);
                          return launch_cluster_pdl(
                              cluster_kernel<T, WT, OT>(ds_out != nullptr, p.rows_a_message, p.max_threads),
                              p.grid * p.cluster, p.threads, p.cluster, 0, stream,
                              static_cast<const OT*>(a.dy), a.dy_row_stride, static_cast<const T*>(a.x),
                              a.x_row_stride, static_cast<const WT*>(a.w), a.rstd, ds_out,
                              a.ds_out_row_stride, static_cast<T*>(a.dx), a.dx_row_stride, partial, a.rows,
                              a.cols, a.offset, llama);
                        });
}

}  // namespace rms_norm_impl
}  // namespace liger_cpp::kernels
