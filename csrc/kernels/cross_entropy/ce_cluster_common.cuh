// What the two sm_90 cluster kernels (ce_cluster.cuh, ce_smem.cuh) share: a
// cluster of CS blocks splits a row, block `rank` owning elements
// [rank * slice, (rank + 1) * slice); each warp reduces its share of the slice,
// and the blocks exchange their statistics through distributed shared memory
// (cluster_row_stats). PTX valid on sm_90+ only (cluster.cuh).
#pragma once

#include <cooperative_groups.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/cluster.cuh"
#include "kernels/cross_entropy/ce_row_math.cuh"

namespace liger_cpp::kernels {
namespace {

namespace cg = cooperative_groups;

constexpr int kMaxCluster = 16;  // the H100/H200 limit (above 8: non-portable, opted in per kernel)
constexpr int kMaxPortableCluster = 8;

// max with NaN propagation (fmaxf would drop a NaN).
__device__ __forceinline__ float max_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// Max of a 16-byte vector (NaN if any element is NaN): packed for 2-byte types.
__device__ __forceinline__ float vec_max(const Vec<__nv_bfloat16, 8>& v) {
  const __nv_bfloat162* w = reinterpret_cast<const __nv_bfloat162*>(&v);
  const __nv_bfloat162 m = __hmax2_nan(__hmax2_nan(w[0], w[1]), __hmax2_nan(w[2], w[3]));
  return max_nan(__low2float(m), __high2float(m));
}
__device__ __forceinline__ float vec_max(const Vec<__half, 8>& v) {
  const __half2* w = reinterpret_cast<const __half2*>(&v);
  const __half2 m = __hmax2_nan(__hmax2_nan(w[0], w[1]), __hmax2_nan(w[2], w[3]));
  return max_nan(__low2float(m), __high2float(m));
}
__device__ __forceinline__ float vec_max(const Vec<float, 4>& v) {
  return max_nan(max_nan(v.v[0], v.v[1]), max_nan(v.v[2], v.v[3]));
}

// The elements of a 16-byte register vector as floats. bf16 -> float is a
// shift or a mask of the 32-bit word (one integer instruction per element;
// the generic conversion spends two on every high half).
__device__ __forceinline__ void vec_to_float(const Vec<__nv_bfloat16, 8>& v, float (&f)[8]) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void vec_to_float(const Vec<__half, 8>& v, float (&f)[8]) {
  const __half2* w = reinterpret_cast<const __half2*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __half22float2(w[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}
__device__ __forceinline__ void vec_to_float(const Vec<float, 4>& v, float (&f)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) f[i] = v.v[i];
}

// A vector of -inf: the padding of a slice's missing vectors, which then drop
// out of the max (max with -inf) and the sum (2^-inf = 0) without a bounds
// test per vector.
template <typename T>
__device__ __forceinline__ void fill_neg_inf(Vec<T, 16 / sizeof(T)>& v) {
  uint32_t* w = reinterpret_cast<uint32_t*>(&v);
  const uint32_t pattern =
      sizeof(T) == 4 ? 0xff800000u : (std::is_same_v<T, __half> ? 0xfc00fc00u : 0xff80ff80u);
#pragma unroll
  for (int i = 0; i < 4; ++i) w[i] = pattern;
}

__device__ __forceinline__ float warp_max_nan(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Statistics of a warp, a block or a cluster in the cluster kernel: the max,
// the sum of exp relative to it, the argmax as an index into the row (the
// cluster path's rows are < 2^31 long) and sum w_j x_j.
struct WarpStats {
  float m, s;
  int arg;
  float wx;
};

__device__ __forceinline__ WarpStats combine_ws(const WarpStats& a, const WarpStats& b) {
  WarpStats r;
  r.m = max_nan(a.m, b.m);
  r.s = a.s * exp_or_zero(a.m, r.m) + b.s * exp_or_zero(b.m, r.m);
  r.arg = b.m > a.m ? b.arg : (a.m > b.m ? a.arg : min(a.arg, b.arg));
  r.wx = a.wx + b.wx;
  return r;
}

// Combines the 32 lanes of a warp in a fixed tree order; the result is in
// lane 0. Empty statistics (m = -inf, s = 0) combine as an exact identity.
__device__ __forceinline__ WarpStats warp_combine_ws(WarpStats a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    WarpStats b;
    b.m = __shfl_down_sync(0xffffffffu, a.m, o);
    b.s = __shfl_down_sync(0xffffffffu, a.s, o);
    b.arg = __shfl_down_sync(0xffffffffu, a.arg, o);
    b.wx = __shfl_down_sync(0xffffffffu, a.wx, o);
    a = combine_ws(a, b);
  }
  return a;
}

// What a block pushes to every block of its cluster: its statistics and, from
// the block whose slice holds the target, the target's (capped) logit.
struct alignas(16) PeerRec {
  WarpStats st;
  float x_y;
  int has_y;
  int pad[2];
};

// Writes v into *slot of the cluster's block dst (the same shared-memory
// offsets in every block) and completes 32 bytes of that block's mbarrier
// transaction count: the receiver waits on its own mbarrier, so no cluster
// barrier is needed for the exchange.
__device__ __forceinline__ void push_rec(const PeerRec& v, PeerRec* slot, unsigned long long* bar, int dst) {
  const uint32_t rslot = peer_addr(slot, dst), rbar = peer_addr(bar, dst);
  st_async_v4(rslot, rbar, __float_as_uint(v.st.m), __float_as_uint(v.st.s), static_cast<uint32_t>(v.st.arg),
              __float_as_uint(v.st.wx));
  st_async_v4(rslot + 16, rbar, __float_as_uint(v.x_y), static_cast<uint32_t>(v.has_y), 0u, 0u);
}

// The row's statistics, from each warp's (ws), in the cluster kernels: warp 0
// combines the block's warps and pushes the result, with the target's capped
// logit where this block's slice holds it (xy_of(), called by one thread), to
// every block of the cluster; each block's warp 0 then combines the cs pushes
// in rank order (deterministic, the same in every block); a one-block cluster
// takes its own statistics without the exchange. Every thread gets
// the row's Stats and the target's capped logit (x_y). The caller has
// initialised stats_bar and arrived on the cluster barrier (this waits on it).
template <typename XY>
__device__ __forceinline__ Stats cluster_row_stats(const WarpStats& ws, bool block_has_y, XY xy_of, int cs,
                                                   int rank, WarpStats* warp_stats, PeerRec* peer_rec,
                                                   unsigned long long* stats_bar, WarpStats& row_stats,
                                                   float& row_xy, float& x_y) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  if (lane == 0) warp_stats[warp] = ws;
  __syncthreads();
  const WarpStats empty{-INFINITY, 0.f, INT32_MAX, 0.f};
  WarpStats b = empty;
  if (warp == 0) b = warp_combine_ws(lane < nwarps ? warp_stats[lane] : empty);
  cluster_wait();  // every block's stats_bar is initialised (long since, by now)
  if (warp == 0 && cs == 1) {
    // A one-block cluster holds the whole row: nothing to exchange (st.async needs a peer
    // block: compute-sanitizer's memcheck reports it as an invalid shared write otherwise).
    if (lane == 0) {
      row_stats = b;
      row_xy = block_has_y ? xy_of() : 0.f;
    }
  } else if (warp == 0) {
    if (lane == 0) {
      const PeerRec mine{b, block_has_y ? xy_of() : 0.f, block_has_y ? 1 : 0, {0, 0}};
      for (int dst = 0; dst < cs; ++dst) push_rec(mine, &peer_rec[rank], stats_bar, dst);
    }
    mbar_wait(stats_bar, 0);
    const PeerRec pr = lane < cs ? peer_rec[lane] : PeerRec{empty, 0.f, 0, {0, 0}};
    const WarpStats c = warp_combine_ws(pr.st);
    const unsigned owner = __ballot_sync(0xffffffffu, pr.has_y != 0);  // exactly one block
    const float xy = __shfl_sync(0xffffffffu, pr.x_y, __ffs(owner) - 1);
    if (lane == 0) {
      row_stats = c;
      row_xy = xy;
    }
  }
  __syncthreads();  // row_stats is visible in the block
  const WarpStats rs = row_stats;
  x_y = row_xy;
  return Stats{rs.m, rs.s, rs.arg == INT32_MAX ? INT64_MAX : static_cast<int64_t>(rs.arg), rs.wx,
               rs.m != rs.m};
}

}  // namespace
}  // namespace liger_cpp::kernels
