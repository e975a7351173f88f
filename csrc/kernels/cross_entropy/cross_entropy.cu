// Cross-entropy row kernels (math: csrc/aten/checks/cross_entropy_core.h).
//
// The gradient of a row needs the row's log-sum-exp, which needs the whole row:
// a plain kernel reads each row twice (statistics, then gradient) and writes it
// once, so it cannot pass 2/3 of the copy bandwidth counted as one read and one
// write. On sm_90 the row instead stays on chip: a cluster of CS blocks splits
// the row, each thread keeps its K 16-byte vectors in registers, the blocks
// exchange their partial statistics through distributed shared memory, and the
// gradient is computed from the registers: one read and one write per element.
// The default variant (ce_smem_kernel) keeps each block's slice in shared
// memory instead, copied there by the TMA engine; the register variant
// (ce_cluster_kernel) remains for rows too long for it and for A/B runs.
// Other architectures, rows that are not 16-byte aligned, tiny rows, and rows
// too long for a cluster take the two-pass kernel.
//
// Statistics per row, combined in a fixed order (deterministic):
//   m = max x, arg = first index of m, s = sum exp(x - m), wx = sum w_j x_j
//   (only needed with label smoothing), nan = any x is NaN.
#include <cooperative_groups.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <type_traits>

#include "kernels/common/cluster.cuh"
#include "kernels/common/common.cuh"
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/common/env_knob.h"
#include "kernels/common/launch_cache.h"

// The sm_90 kernels' helpers are unused in the sm_80 pass (their bodies compile only for sm_90).
#pragma nv_diag_suppress 177

namespace liger_cpp::kernels {
namespace {

namespace cg = cooperative_groups;

struct Stats {
  float m;      // running max (-inf when empty)
  float s;      // sum of exp(x - m)
  int64_t arg;  // index of the first max (INT64_MAX when empty)
  float wx;     // sum of w_j * x_j
  int nan;      // any NaN seen
};

__device__ __forceinline__ Stats empty_stats() { return {-INFINITY, 0.f, INT64_MAX, 0.f, 0}; }

__device__ __forceinline__ float exp_or_zero(float m, float M) {
  // exp(m - M), with an empty side (m = -inf) contributing nothing even when M = -inf.
  return m == -INFINITY ? 0.f : expf(m - M);  // precise: it scales whole partial sums
}

__device__ __forceinline__ Stats combine(const Stats& a, const Stats& b) {
  Stats r;
  r.m = fmaxf(a.m, b.m);
  r.s = a.s * exp_or_zero(a.m, r.m) + b.s * exp_or_zero(b.m, r.m);
  r.arg = b.m > a.m ? b.arg : (a.m > b.m ? a.arg : min(a.arg, b.arg));
  r.wx = a.wx + b.wx;
  r.nan = a.nan | b.nan;
  return r;
}

__device__ __forceinline__ Stats shfl_xor(const Stats& a, int o) {
  Stats b;
  b.m = __shfl_xor_sync(0xffffffffu, a.m, o);
  b.s = __shfl_xor_sync(0xffffffffu, a.s, o);
  b.arg = __shfl_xor_sync(0xffffffffu, a.arg, o);
  b.wx = __shfl_xor_sync(0xffffffffu, a.wx, o);
  b.nan = __shfl_xor_sync(0xffffffffu, a.nan, o);
  return b;
}

__device__ __forceinline__ Stats warp_combine(Stats a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) a = combine(a, shfl_xor(a, o));
  return a;
}

// Combines the statistics of every thread of the block; the result is valid
// in every thread. scratch: 32 Stats in shared memory.
__device__ __forceinline__ Stats block_combine(Stats a, Stats* scratch) {
  a = warp_combine(a);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  if (nwarps == 1) return a;
  __syncthreads();
  if (lane == 0) scratch[warp] = a;
  __syncthreads();
  Stats b = lane < nwarps ? scratch[lane] : empty_stats();
  return warp_combine(b);
}

// Accumulates one element into per-thread statistics (max first, sums later).
struct RowOpts {
  float softcap, inv_softcap;  // softcap 0: none
  const float* weight;         // or null
  bool need_wx;                // label smoothing on
};

__device__ __forceinline__ float cap(float x, const RowOpts& o) {
  return o.softcap > 0.f ? o.softcap * tanhf(x * o.inv_softcap) : x;
}

// 2^x (MUFU; relative error ~2^-22).
__device__ __forceinline__ float ex2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

constexpr float kLog2e = 1.4426950408889634f;

// Constants of one row's gradient, from its combined statistics; the math and
// its grouping are cross_entropy_core.h's.
struct RowGrad {
  float m, s, log2s;  // capped row max, sum of exp(x - m), log2(s)
  float off2;         // m log2 e + log2 s, rounded once (the 2-byte fast path)
  float lse;
  float ca, cb, wsum, zc;  // cs (1 - ls) w_y, cs ls / V, sum(w), zs 2 lss lse
  float softcap, inv_softcap;
  const float* weight;
  int64_t y;
};

// p = exp(x - lse), evaluated as exp(x - m) / s: x - m is exact near the max,
// where p is large (exp(x - lse) with lse rounded to float32 costs several
// times PyTorch's float32 error). FAST (2-byte outputs): one FFMA and one MUFU,
// 2^(x log2 e - off2), the product exact inside the FFMA; off2's rounding
// (<= 2^-24 |off2|, a few 1e-6 relative in p) and MUFU's 2^-22 are ~1000 times
// below a bf16/fp16 output's rounding (2^-9 / 2^-12).
template <bool FAST>
__device__ __forceinline__ float prob(float x, const RowGrad& g) {
  if constexpr (FAST) return ex2(fmaf(x, kLog2e, -g.off2));
  return expf(x - g.m) / g.s;
}

// The gradient at one element (x after softcap, p its probability), grouped so
// that p_y - 1 is formed before any scaling (p_y near 1 cancels exactly) and
// each term vanishes where it should.
template <bool PLAIN>
__device__ __forceinline__ float grad_of(float x, float p, bool is_y, int64_t j, const RowGrad& g) {
  float d = g.ca * (is_y ? p - 1.f : p) + g.zc * p;
  if (!PLAIN) {
    if (g.cb != 0.f) d += g.cb * (g.wsum * p - (g.weight ? __ldg(g.weight + j) : 1.f));
    if (g.softcap > 0.f) {
      const float t = x * g.inv_softcap;
      d *= 1.f - t * t;
    }
  }
  return d;
}

// Loss terms and gradient constants of row r; writes loss / z_loss / argmax
// when `write` (one thread per row).
__device__ __forceinline__ RowGrad finish_row(const CeRowsArgs& a, int64_t r, int64_t y, const Stats& st,
                                              float x_y, bool write) {
  const float V = static_cast<float>(a.cols);
  const float ls = a.label_smoothing, eps = ls / V, lss = a.lse_square_scale;
  const float log_s = logf(st.s);
  const float lse = st.nan ? NAN : st.m + log_s;
  const float wy = a.weight ? __ldg(a.weight + y) : 1.f;
  const float wsum = a.weight ? *a.weight_sum : V;
  if (write) {
    float ce = (1.f - ls) * wy * (lse - x_y);
    if (ls != 0.f) ce += eps * (lse * wsum - st.wx);  // only with smoothing: 0 * inf would be NaN
    a.loss[r] = ce;
    if (a.z_loss) a.z_loss[r] = lss * lse * lse;
    if (a.argmax) a.argmax[r] = st.arg == INT64_MAX ? 0 : st.arg;
  }
  const float cs = a.ce_scale[r * a.ce_scale_stride], zs = a.z_scale[r * a.z_scale_stride];
  RowGrad g;
  g.m = st.nan ? NAN : st.m;
  g.s = st.s;
  g.log2s = log_s * kLog2e;
  g.off2 = fmaf(g.m, kLog2e, g.log2s);
  g.lse = lse;
  g.ca = cs * (1.f - ls) * wy;
  g.cb = cs * eps;
  g.wsum = wsum;
  g.zc = zs * 2.f * lss * lse;
  g.softcap = a.softcap;
  g.inv_softcap = a.softcap > 0.f ? 1.f / a.softcap : 0.f;
  g.weight = a.weight;
  g.y = y;
  return g;
}

// An ignored row (zeros) or a row with an out-of-range target (NaN): the
// calling threads cover [begin, end) of the row's gradient with `stride`.
template <typename T>
__device__ void skip_row(const CeRowsArgs& a, int64_t r, bool ignored, int64_t begin, int64_t end,
                         int64_t stride, bool write) {
  if (write) {
    a.loss[r] = ignored ? 0.f : NAN;
    if (a.z_loss) a.z_loss[r] = ignored ? 0.f : NAN;
    if (a.argmax) a.argmax[r] = -1;
  }
  if (!a.dlogits) return;
  T* d = static_cast<T*>(a.dlogits) + r * a.dlogits_row_stride;
  const T v = from_float<T>(ignored ? 0.f : NAN);
  for (int64_t j = begin; j < end; j += stride) d[j] = v;
}

// ---------------------------------------------------------------------------
// Two-pass kernel: one block per row, any architecture and alignment. VE
// elements per access (16 bytes when the row allows, else 1).

template <typename T, int VE>
__global__ void ce_two_pass_kernel(CeRowsArgs a) {
  __shared__ Stats scratch[32];
  const int64_t r = blockIdx.x;
  const int64_t V = a.cols;
  const int64_t y = a.target[r];
  const bool ignored = y == a.ignore_index;
  if (ignored || y < 0 || y >= V) {
    skip_row<T>(a, r, ignored, threadIdx.x, V, blockDim.x, threadIdx.x == 0);
    return;
  }
  const T* x = static_cast<const T*>(a.logits) + r * a.logits_row_stride;
  const RowOpts o{a.softcap, a.softcap > 0.f ? 1.f / a.softcap : 0.f, a.weight, a.label_smoothing != 0.f};
  // Read before any thread can write the gradient: dlogits may be logits.
  const float x_y = cap(to_float<T>(x[y]), o);
  Stats st = empty_stats();
  for (int64_t j0 = static_cast<int64_t>(threadIdx.x) * VE; j0 < V;
       j0 += static_cast<int64_t>(blockDim.x) * VE) {
    const Vec<T, VE> v = load_vec<T, VE>(x + j0);
#pragma unroll
    for (int e = 0; e < VE; ++e) {
      const float xv = cap(to_float<T>(v.v[e]), o);
      const int64_t j = j0 + e;
      if (xv != xv) st.nan = 1;
      if (xv > st.m) {  // online rescale of the running sum
        st.s = st.s * exp_or_zero(st.m, xv) + 1.f;
        st.m = xv;
        st.arg = j;
      } else {
        st.s += exp_or_zero(xv, st.m);
      }
      if (o.need_wx) st.wx += (o.weight ? __ldg(o.weight + j) : 1.f) * xv;
    }
  }
  st = block_combine(st, scratch);
  const RowGrad g = finish_row(a, r, y, st, x_y, threadIdx.x == 0);
  if (!a.dlogits) return;
  T* d = static_cast<T*>(a.dlogits) + r * a.dlogits_row_stride;
  for (int64_t j0 = static_cast<int64_t>(threadIdx.x) * VE; j0 < V;
       j0 += static_cast<int64_t>(blockDim.x) * VE) {
    const Vec<T, VE> v = load_vec<T, VE>(x + j0);
    Vec<T, VE> out;
#pragma unroll
    for (int e = 0; e < VE; ++e) {
      const float xv = cap(to_float<T>(v.v[e]), o);
      out.v[e] = from_float<T>(grad_of<false>(xv, prob<sizeof(T) == 2>(xv, g), j0 + e == y, j0 + e, g));
    }
    store_vec<T, VE>(d + j0, out);
  }
}

// ---------------------------------------------------------------------------
// Cluster kernel (sm_90): a cluster of CS blocks per row; block `rank` owns
// elements [rank * slice, (rank + 1) * slice), each thread K vectors of VE
// elements at vector indices k * blockDim.x + threadIdx.x of the slice.

constexpr int kClusterThreads = 512;  // most threads per block
constexpr int kClusterK = 8;          // 16-byte vectors per thread
constexpr int kMaxCluster = 16;       // the H100/H200 limit (above 8: non-portable, opted in per kernel)
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

// A thread's kClusterK register vectors of a row slice (vector k at slice
// index k * blockDim.x + threadIdx.x; missing vectors padded with -inf).
template <typename T>
using RowVecs = Vec<T, 16 / sizeof(T)>[kClusterK];

// The statistics of one warp's share of a row slice, valid in every lane:
// m = the warp max (packed per thread, then shuffled), s = sum 2^((x - m)
// log2 e) relative to it (one FFMA + one MUFU per element; no rescaling inside
// the warp), the first index of m in the row only with ARGMAX (else
// INT32_MAX), and sum w_j x_j only when label smoothing wants it.
template <typename T, bool PLAIN, bool ARGMAX>
__device__ __forceinline__ WarpStats warp_slice_stats(RowVecs<T>& buf, int nvec, int64_t base,
                                                      const RowOpts& o) {
  constexpr int VE = 16 / sizeof(T);
  constexpr int K = kClusterK;
  constexpr bool FAST = sizeof(T) == 2;
  const int t = threadIdx.x, T_ = blockDim.x;
  // Max over the warp (NaN if any element is NaN). Padding is -inf; softcap
  // is increasing, so max(cap(x)) = cap(max(x)).
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < K; ++k) m = max_nan(m, vec_max(buf[k]));
  m = warp_max_nan(m);
  int arg = INT32_MAX;
  if (ARGMAX) {  // the first index of the warp max in this thread, then over the warp
                 // Only a vector whose (packed) max is m holds it: search that one.
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int vi = k * T_ + t;
      if (arg == INT32_MAX && vi < nvec && vec_max(buf[k]) == m) {
        float f[VE];
        vec_to_float(buf[k], f);
        int first = VE - 1;
#pragma unroll
        for (int i = VE - 1; i >= 0; --i)
          if (f[i] == m) first = i;
        arg = vi * VE + first;
      }
    }
    arg = __reduce_min_sync(0xffffffffu, arg);
#pragma unroll
    for (int k = 0; k < K; ++k) opaque_16B(buf[k]);  // the sum converts afresh (else spills)
  }
  const float mc = cap(m, o);
  // An all-padding warp (m = -inf) sums 2^-inf = 0 with a zero offset.
  const float off = m == -INFINITY ? 0.f : mc * kLog2e;
  float s0 = 0.f, s1 = 0.f, wx = 0.f;  // two chains: the FADD latency is not exposed
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (!PLAIN && k * T_ + t >= nvec) continue;  // softcap(-inf) is not -inf: skip padding
    float f[VE];
    vec_to_float(buf[k], f);
#pragma unroll
    for (int i = 0; i < VE; ++i) {
      const float xv = cap(f[i], o);
      const float e = FAST ? ex2(fmaf(xv, kLog2e, -off)) : (m == -INFINITY ? 0.f : expf(xv - mc));
      if (i & 1)
        s1 += e;
      else
        s0 += e;
      if (!PLAIN && o.need_wx) wx += (o.weight ? __ldg(o.weight + base + (k * T_ + t) * VE + i) : 1.f) * xv;
    }
  }
  const float s = warp_sum(s0 + s1);
  if (!PLAIN) wx = warp_sum(wx);
  return WarpStats{mc, s, arg == INT32_MAX ? INT32_MAX : static_cast<int>(base) + arg, wx};
}

// Stores the gradient of a thread's K vectors of the slice at d (the slice's
// start in dlogits); the thread that owns the target (yl: its index in the
// slice) then overwrites that one element with its exact gradient.
template <typename T, bool PLAIN>
__device__ __forceinline__ void store_slice_grad(RowVecs<T>& buf, int nvec, int64_t base, T* d,
                                                 const RowGrad& g, const RowOpts& o, bool owns_y, int64_t yl,
                                                 float x_y) {
  constexpr int VE = 16 / sizeof(T);
  constexpr int K = kClusterK;
  constexpr bool FAST = sizeof(T) == 2;
  const int t = threadIdx.x, T_ = blockDim.x;
  // An empty asm "modifies" the raw words, so the compiler cannot keep floats
  // converted above alive until here (which spilled under the 64-register cap).
#pragma unroll
  for (int k = 0; k < K; ++k) opaque_16B(buf[k]);
  const float pc = g.ca + g.zc;  // PLAIN: every element but the target is pc * p
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int vi = k * T_ + t;
    float f[VE];
    vec_to_float(buf[k], f);
    Vec<T, VE> out;
#pragma unroll
    for (int i = 0; i < VE; ++i) {
      const float xv = cap(f[i], o);
      const float p = prob<FAST>(xv, g);
      out.v[i] = from_float<T>(PLAIN ? pc * p : grad_of<false>(xv, p, false, base + vi * VE + i, g));
    }
    if (vi < nvec) store_vec<T, VE>(d + vi * VE, out);
  }
  // The target's element, exactly as the reference groups it (p_y - 1 before
  // any scaling); the same thread stored its vector above, so this store wins.
  if (owns_y) d[yl] = from_float<T>(grad_of<PLAIN>(x_y, prob<FAST>(x_y, g), true, g.y, g));
}

// The row's statistics, from each warp's (ws), in the cluster kernels: warp 0
// combines the block's warps and pushes the result, with the target's capped
// logit where this block's slice holds it (xy_of(), called by one thread), to
// every block of the cluster; each block's warp 0 then combines the cs pushes
// in rank order (deterministic, the same in every block). Every thread gets
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
  if (warp == 0) {
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

// PLAIN: no softcap, no label smoothing, no class weights (the common case,
// compiled without those paths). ARGMAX: the argmax is wanted.
//
// Per thread, with its K raw vectors in registers (missing vectors padded with
// -inf): m = the max over the warp (packed per thread, then shuffled), then
// s = sum 2^((x - m) log2 e) relative to that warp max (one FFMA + one MUFU per
// element; no rescaling inside the warp), the first index of m only with
// ARGMAX; warp statistics are combined over the block by one warp and over the
// cluster through distributed shared memory, and the gradient (p times one
// coefficient) is computed from the registers; the thread that owns the
// target overwrites that one element with its exact gradient afterwards.
template <typename T, bool PLAIN, bool ARGMAX>
__global__ void __launch_bounds__(kClusterThreads, 2) ce_cluster_kernel(CeRowsArgs a, int slice) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int VE = 16 / sizeof(T);
  constexpr int K = kClusterK;
  __shared__ WarpStats warp_stats[32];
  __shared__ PeerRec peer_rec[kMaxCluster];            // pushed by the cluster's blocks, by rank
  __shared__ WarpStats row_stats;                      // the row's, for the whole block
  __shared__ float row_xy, block_xy;                   // the target's capped logit
  __shared__ alignas(8) unsigned long long stats_bar;  // completes when all peer_rec arrived
  cg::cluster_group cluster = cg::this_cluster();
  const int cs = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t r = blockIdx.x / cs;
  const int64_t V = a.cols;
  const int64_t base = static_cast<int64_t>(rank) * slice;
  const int lim = static_cast<int>(V - base < slice ? (V - base > 0 ? V - base : 0) : slice);
  const int64_t y = a.target[r];
  const bool ignored = y == a.ignore_index;
  if (ignored || y < 0 || y >= V) {  // the same branch in every block of the cluster
    skip_row<T>(a, r, ignored, base + threadIdx.x, base + lim, blockDim.x, rank == 0 && threadIdx.x == 0);
    return;
  }
  const T* x = static_cast<const T*>(a.logits) + r * a.logits_row_stride + base;
  RowOpts o{a.softcap, a.softcap > 0.f ? 1.f / a.softcap : 0.f, a.weight, a.label_smoothing != 0.f};
  if (PLAIN) o = RowOpts{0.f, 0.f, nullptr, false};
  const int nvec = lim / VE;  // V is a multiple of VE on this path
  const int t = threadIdx.x, T_ = blockDim.x;
  const int lane = t & 31, warp = t >> 5, nwarps = T_ >> 5;
  if (t == 0) {
    mbar_init(&stats_bar);
    mbar_expect_tx(&stats_bar, static_cast<uint32_t>(cs * sizeof(PeerRec)));
    fence_mbar_init();
  }
  cluster_arrive_relaxed();  // peers push only after the wait below: every stats_bar is ready

  // All loads first, so K vectors per thread are in flight: volatile asm keeps
  // the compiler from sinking them next to their uses.
  RowVecs<T> buf;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (k * T_ + t < nvec)
      load_16B_volatile(buf[k], x + (k * T_ + t) * VE);
    else
      fill_neg_inf<T>(buf[k]);
  }
  // The target's logit: read by the one thread whose vectors hold it (before
  // it writes its gradient: dlogits may be logits) and pushed with its block's
  // statistics, instead of a dependent load in every thread of the cluster.
  const int64_t yl = y - base;  // the target's index in this block's slice (may be outside it)
  const bool block_has_y = yl >= 0 && yl < lim;
  const bool owns_y = block_has_y && (yl / VE) % T_ == t;
  if (owns_y) block_xy = cap(to_float<T>(x[yl]), o);

  const WarpStats ws = warp_slice_stats<T, PLAIN, ARGMAX>(buf, nvec, base, o);

  float x_y;
  const Stats all = cluster_row_stats(
      ws, block_has_y, [&] { return block_xy; }, cs, rank, warp_stats, peer_rec, &stats_bar, row_stats,
      row_xy, x_y);
  const RowGrad g = finish_row(a, r, y, all, x_y, rank == 0 && t == 0);
  if (a.dlogits)
    store_slice_grad<T, PLAIN>(buf, nvec, base, static_cast<T*>(a.dlogits) + r * a.dlogits_row_stride + base,
                               g, o, owns_y, yl, x_y);
#else
  __trap();  // the host launches this kernel only where its sm_90 code runs
#endif
}

// ---------------------------------------------------------------------------
// Shared-memory cluster kernel (sm_90; the default, see smem_choice()): the cluster
// kernel's split of a row over CS blocks and its exchange of statistics, but
// each block's slice is copied into its shared memory by the TMA engine
// (cp.async.bulk, a few instructions per block, completing on an mbarrier)
// instead of into registers. The cluster kernel's registers hold at most
// 128 KiB of a row per SM (64 registers x 2048 threads, half of them data);
// shared memory adds up to 227 KiB, and with few registers per thread more
// blocks share an SM, so more rows are in flight and one block's reduce and
// exchange overlap other blocks' loads. Statistics and gradient are computed
// exactly as the cluster kernel does (the warp max first, then the sum
// relative to it, in the same element order per thread).

constexpr int kSmemThreads = 256;      // threads per block
constexpr int kSmemChunkBytes = 4096;  // one bulk copy per chunk, issued by the lanes of warp 0

template <typename T, bool PLAIN, bool ARGMAX>
__global__ void __launch_bounds__(kSmemThreads) ce_smem_kernel(CeRowsArgs a, int slice) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int VE = 16 / sizeof(T);
  constexpr bool FAST = sizeof(T) == 2;
  using V16 = Vec<T, VE>;
  extern __shared__ __align__(128) unsigned char ce_smem_raw[];
  const V16* sv = reinterpret_cast<const V16*>(ce_smem_raw);
  __shared__ WarpStats warp_stats[32];
  __shared__ PeerRec peer_rec[kMaxCluster];
  __shared__ WarpStats row_stats;
  __shared__ float row_xy;
  __shared__ alignas(8) unsigned long long stats_bar, load_bar;
  cg::cluster_group cluster = cg::this_cluster();
  const int cs = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t r = blockIdx.x / cs;
  const int64_t V = a.cols;
  const int64_t base = static_cast<int64_t>(rank) * slice;
  const int lim = static_cast<int>(V - base < slice ? (V - base > 0 ? V - base : 0) : slice);
  const int64_t y = a.target[r];
  const bool ignored = y == a.ignore_index;
  if (ignored || y < 0 || y >= V) {  // the same branch in every block of the cluster
    skip_row<T>(a, r, ignored, base + threadIdx.x, base + lim, blockDim.x, rank == 0 && threadIdx.x == 0);
    return;
  }
  const T* x = static_cast<const T*>(a.logits) + r * a.logits_row_stride + base;
  RowOpts o{a.softcap, a.softcap > 0.f ? 1.f / a.softcap : 0.f, a.weight, a.label_smoothing != 0.f};
  if (PLAIN) o = RowOpts{0.f, 0.f, nullptr, false};
  const int nvec = lim / VE;  // V is a multiple of VE on this path
  const int t = threadIdx.x, T_ = blockDim.x;
  const int lane = t & 31, warp = t >> 5, nwarps = T_ >> 5;
  if (t == 0) {
    mbar_init(&stats_bar);
    mbar_init(&load_bar);
    fence_mbar_init();
    fence_proxy_async_smem();  // the inits, seen by the TMA engine
    mbar_expect_tx(&stats_bar, static_cast<uint32_t>(cs * sizeof(PeerRec)));
    mbar_expect_tx(&load_bar, static_cast<uint32_t>(nvec) * 16u);
  }
  __syncthreads();           // load_bar is initialised before any thread waits on it
  cluster_arrive_relaxed();  // peers push only after the wait below: every stats_bar is ready
  if (warp == 0) {
    const uint32_t bytes = static_cast<uint32_t>(nvec) * 16u;
    for (uint32_t c = static_cast<uint32_t>(lane) * kSmemChunkBytes; c < bytes; c += 32u * kSmemChunkBytes)
      bulk_copy_g2s(ce_smem_raw + c, reinterpret_cast<const unsigned char*>(x) + c,
                    bytes - c < kSmemChunkBytes ? bytes - c : kSmemChunkBytes, &load_bar);
  }
  const int64_t yl = y - base;  // the target's index in this block's slice (may be outside it)
  const bool block_has_y = yl >= 0 && yl < lim;
  const bool owns_y = block_has_y && (yl / VE) % T_ == t;
  mbar_wait(&load_bar, 0);

  // The warp's statistics over this thread's vectors t, t + T_, ...: the max
  // (NaN if any), its first index with ARGMAX, then the sum relative to it.
  float m = -INFINITY;
#pragma unroll 4
  for (int vi = t; vi < nvec; vi += T_) m = max_nan(m, vec_max(sv[vi]));
  m = warp_max_nan(m);
  int arg = INT32_MAX;
  if (ARGMAX) {
    for (int vi = t; vi < nvec && arg == INT32_MAX; vi += T_) {
      const V16 v = sv[vi];
      if (vec_max(v) == m) {
        float f[VE];
        vec_to_float(v, f);
        int first = VE - 1;
#pragma unroll
        for (int i = VE - 1; i >= 0; --i)
          if (f[i] == m) first = i;
        arg = vi * VE + first;
      }
    }
    arg = __reduce_min_sync(0xffffffffu, arg);
  }
  const float mc = cap(m, o);
  const float off = m == -INFINITY ? 0.f : mc * kLog2e;
  float s0 = 0.f, s1 = 0.f, wx = 0.f;
#pragma unroll 4
  for (int vi = t; vi < nvec; vi += T_) {
    float f[VE];
    vec_to_float(sv[vi], f);
#pragma unroll
    for (int i = 0; i < VE; ++i) {
      const float xv = cap(f[i], o);
      const float e = FAST ? ex2(fmaf(xv, kLog2e, -off)) : (m == -INFINITY ? 0.f : expf(xv - mc));
      if (i & 1)
        s1 += e;
      else
        s0 += e;
      if (!PLAIN && o.need_wx) wx += (o.weight ? __ldg(o.weight + base + vi * VE + i) : 1.f) * xv;
    }
  }
  WarpStats ws{mc, warp_sum(s0 + s1), arg == INT32_MAX ? INT32_MAX : static_cast<int>(base) + arg, 0.f};
  if (!PLAIN) ws.wx = warp_sum(wx);

  // Block and cluster: the target's logit comes from this block's shared slice.
  float x_y;
  const Stats all = cluster_row_stats(
      ws, block_has_y, [&] { return cap(to_float<T>(reinterpret_cast<const T*>(ce_smem_raw)[yl]), o); }, cs,
      rank, warp_stats, peer_rec, &stats_bar, row_stats, row_xy, x_y);
  const RowGrad g = finish_row(a, r, y, all, x_y, rank == 0 && t == 0);
  if (!a.dlogits) return;
  T* d = static_cast<T*>(a.dlogits) + r * a.dlogits_row_stride + base;
  const float pc = g.ca + g.zc;  // PLAIN: every element but the target is pc * p
#pragma unroll 4
  for (int vi = t; vi < nvec; vi += T_) {
    float f[VE];
    vec_to_float(sv[vi], f);
    V16 out;
#pragma unroll
    for (int i = 0; i < VE; ++i) {
      const float xv = cap(f[i], o);
      const float p = prob<FAST>(xv, g);
      out.v[i] = from_float<T>(PLAIN ? pc * p : grad_of<false>(xv, p, false, base + vi * VE + i, g));
    }
    store_vec<T, VE>(d + vi * VE, out);
  }
  // The target's element, as the cluster kernel (this thread stored its vector above).
  if (owns_y) d[yl] = from_float<T>(grad_of<PLAIN>(x_y, prob<FAST>(x_y, g), true, g.y, g));
#else
  __trap();  // the host launches this kernel only where its sm_90 code runs
#endif
}

// ---------------------------------------------------------------------------
// d[r, :] *= g[r * g_stride], skipping rows whose factor is exactly 1.

template <typename T, int VE>
__global__ void scale_rows_kernel(T* d, int64_t row_stride, int64_t rows, int64_t cols, const float* g,
                                  int64_t g_stride, int64_t tiles_per_row) {
  constexpr int kTile = 256 * 4;             // vectors per tile: 4 per thread
  if (g_stride == 0 && g[0] == 1.f) return;  // a reduced loss with grad_output 1 (the usual case)
  for (int64_t t = blockIdx.x; t < rows * tiles_per_row; t += gridDim.x) {
    const int64_t r = t / tiles_per_row;
    const float f = g[r * g_stride];
    if (f == 1.f) continue;
    T* dr = d + r * row_stride;
    const int64_t v0 = (t % tiles_per_row) * kTile;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t j = (v0 + k * 256 + threadIdx.x) * VE;
      if (j < cols) {
        Vec<T, VE> v = load_vec<T, VE>(dr + j);
#pragma unroll
        for (int i = 0; i < VE; ++i) v.v[i] = from_float<T>(to_float<T>(v.v[i]) * f);
        store_vec<T, VE>(dr + j, v);
      }
    }
  }
}

// Which sm_90 row kernel runs: LIGER_CPP_CE_SMEM (read on every call, for A/B
// runs in one process). Unset or auto (the default): ce_smem_kernel with the
// fewest blocks per row (a power of two, at most 8) whose slice fits in
// kSmemAutoBytes, else 8; 1 / 2 / 4 / 8: that many blocks per row; off: the
// register cluster kernel. Rows whose slice does not fit kSmemMaxBytes take
// the register kernel. bf16 op fwd+bwd at 8192 x V, % of C (benchmarks/
// results/2026-11-30-h200-cross_entropy-smem-1b5a435):
//   V = 32000:  auto (2 blocks) 90.2 | 1: 88.1 | 4: 70.2 | register kernel 84.7
//   V = 128256: auto (8) 88.9 | 4: 88.4 | 2: 65.0 | register kernel 83.7
//   V = 151936: auto (8) 88.5 | 4: 78.2 | register kernel 78.1
//   V = 262144: auto (8) 87.9 | 2: 79.7 | register kernel 79.6
int smem_choice() {
  const int i = env_choice("LIGER_CPP_CE_SMEM", {"off", "auto", "1", "2", "4", "8"});
  return i < 0 ? 1 : i;
}
constexpr int64_t kSmemAutoBytes = 40 * 1024;
constexpr size_t kSmemMaxBytes = 200 * 1024;

template <typename T>
cudaError_t launch_rows(const CeRowsArgs& a, cudaStream_t stream) {
  constexpr int VE16 = 16 / sizeof(T);
  const int64_t V = a.cols;
  const bool aligned =
      is_aligned(a.logits, 16) && (a.logits_row_stride * sizeof(T)) % 16 == 0 &&
      (!a.dlogits || (is_aligned(a.dlogits, 16) && (a.dlogits_row_stride * sizeof(T)) % 16 == 0)) &&
      V % VE16 == 0;
  // sm_90, rows of at least 2048 elements: ce_smem_kernel (the default, see smem_choice()), else
  // the register cluster kernel: cs blocks of `threads` threads per row, K vectors a thread. The kernel is
  // latency-bound (load, reduce, exchange, store per block), and the plan that measured best is a
  // power-of-two number of blocks per row, the fewest that keep a block at most 320 threads: bf16 op fwd+bwd,
  // % of C (benchmarks/results/2026-11-30-h200-cross_entropy-ab-*-{b055154,65a82a6}.json):
  //   V = 32000:  2 x 256 85.2 | 1 x 512 80.7 | 4 x 128 82.6 | 3 x 192 76.2
  //   V = 128256: 8 x 256 83.9 | 4 x 512 80.9 | 16 x 128 80.6 | 6 x 352 65.5 | 12 x 192 70.9
  //   V = 151936: 8 x 320 78.2 | 5 x 480 76.6 | 10 x 256 76.3 | 16 x 160 76.4 | 12 x 224 71.0
  //   V = 262144: 16 x 256 80.0 | 8 x 512 79.9 | 12 x 352 55.4
  // Clusters above 8 blocks are non-portable: the kernel opts in and the occupancy query must
  // confirm that such a cluster fits; otherwise 512-thread blocks (at most 8).
  // LIGER_CPP_CE_BLOCK=128|256|512 forces a block size, LIGER_CPP_CE_CLUSTER=1..16 the blocks per
  // row, where they fit (A/B measurements).
  static const int64_t forced_threads = [] {
    const int i = env_choice("LIGER_CPP_CE_BLOCK", {"128", "256", "512"});
    return i < 0 ? int64_t{0} : (int64_t{128} << i);
  }();
  static const int64_t forced_cs = [] {
    const int i = env_choice("LIGER_CPP_CE_CLUSTER", {"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11",
                                                      "12", "13", "14", "15", "16"});
    return int64_t{i + 1};  // 0: not set
  }();
  // LIGER_CPP_CE_TWO_PASS=1 forces the two-pass kernel (A/B measurements).
  static const bool force_two_pass = env_choice("LIGER_CPP_CE_TWO_PASS", {"0", "1"}) == 1;
  // The cluster kernels where their sm_90 code runs on this device (not on older GPUs, nor from a
  // build without sm_90: their stubs trap); every instantiation is built for the same targets.
  const bool sm90_code =
      binary_version(reinterpret_cast<const void*>(ce_cluster_kernel<T, true, false>)) >= 90;
  if (!force_two_pass && aligned && sm90_code && V >= 2048) {
    const int sc = smem_choice();
    if (sc >= 1) {
      const bool plain = a.softcap == 0.f && a.label_smoothing == 0.f && a.weight == nullptr;
      const bool am = a.argmax != nullptr;
      auto* kern = plain ? (am ? ce_smem_kernel<T, true, true> : ce_smem_kernel<T, true, false>)
                         : (am ? ce_smem_kernel<T, false, true> : ce_smem_kernel<T, false, false>);
      const void* f = reinterpret_cast<const void*>(kern);
      auto slice_for = [&](int64_t c) { return ceil_div(ceil_div(V, c), int64_t{VE16}) * VE16; };
      int64_t cs = sc >= 2 ? int64_t{1} << (sc - 2) : 0;
      for (int64_t c = 1; cs == 0 && c <= kMaxPortableCluster; c *= 2)
        if (slice_for(c) * static_cast<int64_t>(sizeof(T)) <= kSmemAutoBytes) cs = c;
      if (cs == 0) cs = kMaxPortableCluster;
      const int64_t slice = slice_for(cs);
      const size_t smem = static_cast<size_t>(slice) * sizeof(T);
      if (a.rows * cs <= INT32_MAX && smem <= kSmemMaxBytes && raise_max_dynamic_smem(f, smem)) {
        prefer_max_shared_carveout(f);
        cudaLaunchAttribute attr[1];
        cudaLaunchConfig_t cfg =
            cluster_launch_config(kSmemThreads, static_cast<int>(cs), smem, stream, attr);
        cfg.gridDim = dim3(static_cast<unsigned>(a.rows * cs));
        return cudaLaunchKernelEx(&cfg, kern, a, static_cast<int>(slice));
      }
    }
    const int64_t per_thread = static_cast<int64_t>(kClusterK) * VE16;
    const bool plain = a.softcap == 0.f && a.label_smoothing == 0.f && a.weight == nullptr;
    const bool am = a.argmax != nullptr;
    auto* kern = plain ? (am ? ce_cluster_kernel<T, true, true> : ce_cluster_kernel<T, true, false>)
                       : (am ? ce_cluster_kernel<T, false, true> : ce_cluster_kernel<T, false, false>);
    auto threads_for = [&](int64_t cs) {
      return static_cast<int>(ceil_div(ceil_div(V, cs * per_thread), 32) * 32);
    };
    auto fits = [&](int64_t cs) {
      if (cs > kMaxCluster || a.rows * cs > INT32_MAX) return false;
      if (cs <= kMaxPortableCluster) return true;
      const void* f = reinterpret_cast<const void*>(kern);
      return allow_nonportable_clusters(f) &&
             active_clusters(kern, threads_for(cs), static_cast<int>(cs)) >= 1;
    };
    auto usable = [&](int64_t cs, int64_t max_threads) {
      return cs > 0 && threads_for(cs) <= max_threads && fits(cs);
    };
    int64_t cs = 0;
    if (forced_cs > 0 || forced_threads > 0) {
      const int64_t want = forced_cs > 0 ? forced_cs : ceil_div(V, forced_threads * per_thread);
      if (usable(want, kClusterThreads)) cs = want;
    }
    for (int64_t c = 1; cs == 0 && c <= kMaxCluster; c *= 2)
      if (usable(c, 320)) cs = c;
    if (cs == 0 && usable(ceil_div(V, kClusterThreads * per_thread), kClusterThreads))
      cs = ceil_div(V, kClusterThreads * per_thread);
    if (cs > 0) {
      const int threads = threads_for(cs);
      cudaLaunchAttribute attr[1];
      cudaLaunchConfig_t cfg = cluster_launch_config(threads, static_cast<int>(cs), 0, stream, attr);
      cfg.gridDim = dim3(static_cast<unsigned>(a.rows * cs));
      return cudaLaunchKernelEx(&cfg, kern, a, static_cast<int>(threads * per_thread));
    }
  }
  if (a.rows > INT32_MAX) return cudaErrorInvalidValue;
  const int threads = V >= 8192 ? 1024 : (V >= 1024 ? 256 : 128);
  if (aligned)
    ce_two_pass_kernel<T, VE16><<<static_cast<unsigned>(a.rows), threads, 0, stream>>>(a);
  else
    ce_two_pass_kernel<T, 1><<<static_cast<unsigned>(a.rows), threads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t ce_rows(const CeRowsArgs& a, int /*sm_count*/, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  return dispatch_dtype(a.dtype, [&](auto t) { return launch_rows<decltype(t)>(a, stream); });
}

cudaError_t ce_scale_rows(void* d, int64_t row_stride, int64_t rows, int64_t cols, const float* g,
                          int64_t g_stride, DType dtype, int sm_count, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  return dispatch_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    constexpr int VE16 = 16 / sizeof(T);
    const bool aligned = is_aligned(d, 16) && (row_stride * sizeof(T)) % 16 == 0 && cols % VE16 == 0;
    const int ve = aligned ? VE16 : 1;
    const int64_t tiles_per_row = ceil_div(ceil_div(cols, ve), 256 * 4);
    const int64_t tiles = rows * tiles_per_row;
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>(tiles, static_cast<int64_t>(sm_count) * 8));
    if (aligned)
      scale_rows_kernel<T, VE16>
          <<<grid, 256, 0, stream>>>(static_cast<T*>(d), row_stride, rows, cols, g, g_stride, tiles_per_row);
    else
      scale_rows_kernel<T, 1>
          <<<grid, 256, 0, stream>>>(static_cast<T*>(d), row_stride, rows, cols, g, g_stride, tiles_per_row);
    return cudaGetLastError();
  });
}

}  // namespace liger_cpp::kernels
