// Row kernels of the RL and distillation losses (math: divergence.h). One block per row (rows
// striding over the grid), 16-byte vector accesses where the rows allow, float32 math. The
// statistics a row's gradient needs (softmax normalisers, sums over the row) are reduced over the
// block first and the row is read again: these kernels read a row two or three times (the re-reads
// mostly from L2) and write it once.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/common.cuh"
#include "kernels/common/launch_cache.h"
#include "kernels/common/plan_override.h"
#include "kernels/divergence/divergence.h"
#include "kernels/divergence/row_common.cuh"

// The sm_90 kernel's helpers are unused in the sm_80 pass (its body compiles only for sm_90).
#pragma nv_diag_suppress 177

// max_nan, warp_max_nan, ex2, exp_or_zero, kLog2e and the cluster / TMA helpers, shared with the
// cross entropy's cluster kernels.
#include "kernels/cross_entropy/ce_cluster_common.cuh"

namespace liger_cpp::kernels {
namespace {

// Online max and sum of exp(x - max) of one thread's elements.
struct Online {
  float m = -INFINITY, s = 0.f;
  __device__ __forceinline__ void add(float x) {
    if (x == -INFINITY) return;  // contributes nothing (and -inf - -inf would be NaN)
    if (x > m) {
      s = s * (m == -INFINITY ? 0.f : expf(m - x)) + 1.f;
      m = x;
    } else {
      s += expf(x - m);  // NaN x propagates here
    }
  }
};

// The block's (max, log sum exp(x - max)) from every thread's Online.
__device__ __forceinline__ float2 block_lse(const Online& o, float* scratch) {
  const float M = block_max(o.m, scratch);
  const float s = block_sum(o.m == -INFINITY ? 0.f : o.s * expf(o.m - M), scratch);
  return make_float2(M, logf(s));
}

// exp and log of the distillation kernel's element passes. FAST (2-byte logits, whose gradient is
// rounded to 2^-8 / 2^-11): the MUFU's ex2 / lg2 (relative error ~2^-22, and the product with log2 e
// rounded once) instead of the precise expf / logf; the row statistics (pass 1) stay precise.
constexpr float kLn2 = 0.6931471805599453f;  // kLog2e: ce_row_math.cuh

template <bool FAST>
__device__ __forceinline__ float exp_(float x) {
  if constexpr (FAST) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x * kLog2e));
    return r;
  }
  return expf(x);
}

template <bool FAST>
__device__ __forceinline__ float log_(float x) {
  if constexpr (FAST) {
    float r;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r * kLn2;
  }
  return logf(x);
}

// log M of the mixture M = beta P + (1 - beta) S from the two probabilities (one log, no
// logaddexp): -inf where both underflow, and those terms are 0 (pdiff).
template <bool FAST>
__device__ __forceinline__ float log_mix(float P, float S, float beta) {
  const float M = beta * P + (1.f - beta) * S;
  return M > 0.f ? log_<FAST>(M) : -INFINITY;
}

__device__ __forceinline__ float logaddexp(float a, float b) {
  const float m = fmaxf(a, b);
  if (m == -INFINITY) return -INFINITY;
  return m + log1pf(expf(-fabsf(a - b)));
}

// A floor for log-probabilities: exp of it is 0 and differences with finite values stay finite.
constexpr float kLogFloor = -1e30f;

// p * (a - b), 0 where p is 0 (a masked class: its -inf log-probability times 0).
__device__ __forceinline__ float pdiff(float p, float a, float b) { return p > 0.f ? p * (a - b) : 0.f; }

// ---------------------------------------------------------------------------------------- distill

// N elements of U at p (aligned to 16 bytes, or N == 1) as floats, in 16-byte pieces: a teacher
// row of float32 probabilities beside bf16 logits takes two pieces a group.
template <typename U, int N>
__device__ __forceinline__ void load_floats(const U* p, float (&f)[N]) {
  constexpr int P = 16 / sizeof(U) < N ? 16 / sizeof(U) : N;
#pragma unroll
  for (int k = 0; k < N / P; ++k) {
    const Vec<U, P> v = load_vec<U, P>(p + k * P);
#pragma unroll
    for (int i = 0; i < P; ++i) f[k * P + i] = to_float<U>(v.v[i]);
  }
}

// The loss modes of DistillRowsArgs::loss.
constexpr int kJsd = 0, kCosine = 1, kKl = 2;

// A block per row (any architecture and alignment: the fallback of distill_smem_kernel below):
// the row pair is read from global memory once for the statistics, once more for JSD's row sums
// and once for the gradient.
template <typename T, typename U, int VE>
__global__ void __launch_bounds__(kMaxThreads) distill_kernel(DistillRowsArgs a) {
  constexpr bool FAST = sizeof(T) == 2;
  __shared__ float scratch[32];
  const int64_t V = a.cols, Vs = a.student_cols;
  const float invT = a.inv_temperature, beta = a.beta;
  const bool cosine = a.loss == kCosine, kl = a.loss == kKl;
  const int64_t step = static_cast<int64_t>(blockDim.x) * VE,
                j_first = static_cast<int64_t>(threadIdx.x) * VE;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    T* s = static_cast<T*>(a.s) + r * a.s_row_stride;
    const U* t = static_cast<const U*>(a.t) + r * a.t_row_stride;
    const int64_t y = a.target ? a.target[r] : -1;
    const bool valid = a.target == nullptr || y != a.ignore_index;
    if (!valid && (a.mask_soft || kl)) {
      if (threadIdx.x == 0) a.soft[r] = a.hard[r] = 0.f;
      if (a.scales) zero_row<T, VE>(s, V);
      continue;
    }
    const bool hard = valid && a.target != nullptr && !kl && a.with_hard;
    // The hard loss's own lse (at temperature 1, over the student's classes) unless it is the soft one's.
    const bool sep_hard = hard && (cosine || invT != 1.f || Vs != V);
    // Read before any thread writes the gradient over s.
    const float s_y = hard ? to_float<T>(s[y]) : 0.f;
    Online os, ot, oh;
    float suu = 0.f, svv = 0.f, suv = 0.f, sq = 0.f;
    for (int64_t j0 = j_first; j0 < V; j0 += step) {
      const Vec<T, VE> sv = load_vec<T, VE>(s + j0);
      float tf[VE];
      load_floats<U, VE>(t + j0, tf);
#pragma unroll
      for (int e = 0; e < VE; ++e) {
        const float sx = to_float<T>(sv.v[e]), zs = sx * invT, zt = tf[e] * invT;
        if (cosine) {
          suu += zs * zs;
          svv += zt * zt;
          suv += zs * zt;
        } else {
          os.add(zs);
          if (kl)
            sq += tf[e];
          else
            ot.add(zt);
        }
        if (sep_hard && j0 + e < Vs) oh.add(sx);
      }
    }
    float2 ls = make_float2(0.f, 0.f), lt = ls, lh = ls;
    float nu = 1.f, nv = 1.f, c = 0.f, Q = 0.f;
    if (cosine) {
      nu = fmaxf(sqrtf(block_sum(suu, scratch)), 1e-12f);
      nv = fmaxf(sqrtf(block_sum(svv, scratch)), 1e-12f);
      c = block_sum(suv, scratch) / (nu * nv);
    } else {
      ls = block_lse(os, scratch);
      if (kl)
        Q = block_sum(sq, scratch);
      else
        lt = block_lse(ot, scratch);
    }
    if (sep_hard) lh = block_lse(oh, scratch);
    if (hard && !sep_hard) lh = ls;
    // JSD's row sums: the loss, and K = sum S (log S - log M) for the gradient.
    float soft = 0.f, K = 0.f;
    const bool grad = a.scales != nullptr;
    if (cosine) {
      soft = beta * (1.f - c);
    } else if (!kl && !(beta == 0.f && grad)) {  // beta 0 with a gradient: summed in that pass
      float acc = 0.f, acck = 0.f;
      for (int64_t j0 = j_first; j0 < V; j0 += step) {
        const Vec<T, VE> sv = load_vec<T, VE>(s + j0);
        float tf[VE];
        load_floats<U, VE>(t + j0, tf);
#pragma unroll
        for (int e = 0; e < VE; ++e) {
          const float lS = (to_float<T>(sv.v[e]) * invT - ls.x) - ls.y;
          const float lP = (tf[e] * invT - lt.x) - lt.y;
          const float S = exp_<FAST>(lS), P = exp_<FAST>(lP);
          if (beta == 0.f) {
            acc += pdiff(P, lP, lS);
          } else if (beta == 1.f) {
            acc += pdiff(S, lS, lP);
          } else {
            const float lM = log_mix<FAST>(P, S, beta);
            const float ks = pdiff(S, lS, lM);
            acc += beta * pdiff(P, lP, lM) + (1.f - beta) * ks;
            acck += ks;
          }
        }
      }
      soft = block_sum(acc, scratch);
      K = beta == 1.f ? soft : (beta == 0.f ? 0.f : block_sum(acck, scratch));
    }
    const float hard_loss = hard ? (lh.x + lh.y) - s_y : 0.f;
    // KL's loss (and JSD's at beta 0 with a gradient) is summed in the last pass.
    const bool late_sum = kl || (!cosine && beta == 0.f && grad);
    if (!grad && !late_sum) {
      if (threadIdx.x == 0) {
        a.soft[r] = soft;
        a.hard[r] = hard_loss;
      }
      continue;
    }
    const float cs = grad ? a.scales[0] * invT : 0.f, ch = hard && grad ? a.scales[1] : 0.f;
    float acc0 = 0.f;
    for (int64_t j0 = j_first; j0 < V; j0 += step) {
      const Vec<T, VE> sv = load_vec<T, VE>(s + j0);
      float tf[VE];
      load_floats<U, VE>(t + j0, tf);
      Vec<T, VE> out;
#pragma unroll
      for (int e = 0; e < VE; ++e) {
        const int64_t j = j0 + e;
        const float sx = to_float<T>(sv.v[e]), zs = sx * invT, zt = tf[e] * invT;
        float d = 0.f, S = 0.f;
        if (cosine) {
          d = cs * (-beta) * (zt / (nu * nv) - c * zs / (nu * nu));
        } else if (kl) {
          const float lS = (zs - ls.x) - ls.y, q = tf[e];
          S = exp_<FAST>(lS);
          acc0 += q * (log_<FAST>(fmaxf(q, a.eps)) - lS);
          d = cs * (S * Q - q);
        } else {
          const float lS = (zs - ls.x) - ls.y, lP = (zt - lt.x) - lt.y;
          S = exp_<FAST>(lS);
          const float P = exp_<FAST>(lP);
          if (beta == 0.f) {
            acc0 += pdiff(P, lP, lS);
            d = cs * (S - P);
          } else if (beta == 1.f) {
            d = cs * (S > 0.f ? S * ((lS - lP) - K) : 0.f);
          } else {
            const float lM = log_mix<FAST>(P, S, beta);
            d = cs * (1.f - beta) * (S > 0.f ? S * ((lS - lM) - K) : 0.f);
          }
        }
        if (ch != 0.f && j < Vs) {
          // the hard softmax is the soft one's where they share temperature 1 and the classes
          const float p = sep_hard ? exp_<FAST>((sx - lh.x) - lh.y) : S;
          d += ch * (j == y ? p - 1.f : p);  // p_y - 1 formed before the scaling
        }
        out.v[e] = from_float<T>(j < Vs ? d : 0.f);
      }
      if (grad) store_vec<T, VE>(s + j0, out);
    }
    if (late_sum) soft = block_sum(acc0, scratch);
    if (threadIdx.x == 0) {
      a.soft[r] = soft;
      a.hard[r] = hard_loss;
    }
  }
}

// The shared-memory cluster kernel (sm_90; the default for 16-byte aligned rows of >= 2048
// elements): a cluster of CS blocks splits each row pair, block `rank` owning elements
// [rank * slice, (rank + 1) * slice) of both rows, copied into its shared memory by the TMA engine
// (one read of each from global memory); the statistics and, for JSD, the row sums are exchanged
// through distributed shared memory; the gradient is written from the copies. The row kernel of
// the cross entropy works the same way (ce_smem.cuh), for one row instead of a pair.
constexpr int kPairThreads = 512;      // most threads per block
constexpr int kPairChunkBytes = 4096;  // one bulk copy per chunk
constexpr int kRec = 12;               // floats in a block's record (three 16-byte pushes)

// A record of partial row statistics: (max, sum of exp relative to it) pairs for the student's
// soft softmax (0), the teacher's (1) and the student's hard one (2), and plain sums (9..11:
// cosine's |zs|^2, |zt|^2, zs . zt; KL's sum q; the row-sum exchange's loss and K).
// Where a block's teacher slice starts in its shared memory: after the student's, 128-byte aligned.
__host__ __device__ inline size_t pair_t_offset(int slice, size_t s_elem) {
  return (static_cast<size_t>(slice) * s_elem + 127) & ~size_t{127};
}

struct PairRec {
  float v[kRec];
};

__device__ __forceinline__ PairRec empty_rec() {
  PairRec r;
#pragma unroll
  for (int i = 0; i < kRec; ++i) r.v[i] = (i < 6 && i % 2 == 0) ? -INFINITY : 0.f;
  return r;
}

// The fields an exchange carries: the first NP (max, sum) pairs and the plain sums v[S0, S1); the
// others are neither moved nor combined (each exchange's latency is on every block's critical path).
template <int NP, int S0, int S1>
__device__ __forceinline__ PairRec combine_rec(const PairRec& a, const PairRec& b) {
  PairRec r = a;
#pragma unroll
  for (int k = 0; k < NP; ++k) {
    const float m = max_nan(a.v[2 * k], b.v[2 * k]);
    r.v[2 * k] = m;
    r.v[2 * k + 1] =
        a.v[2 * k + 1] * exp_or_zero(a.v[2 * k], m) + b.v[2 * k + 1] * exp_or_zero(b.v[2 * k], m);
  }
#pragma unroll
  for (int i = S0; i < S1; ++i) r.v[i] = a.v[i] + b.v[i];
  return r;
}

// Combines the records of lanes [0, n) in a fixed tree order (the levels below n); the result is
// in lane 0.
template <int NP, int S0, int S1>
__device__ __forceinline__ PairRec warp_combine_rec(PairRec a, int n) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    if (o >= n) continue;  // uniform: lanes o.. hold empty records at this level
    PairRec b = a;
#pragma unroll
    for (int k = 0; k < 2 * NP; ++k) b.v[k] = __shfl_down_sync(0xffffffffu, a.v[k], o);
#pragma unroll
    for (int i = S0; i < S1; ++i) b.v[i] = __shfl_down_sync(0xffffffffu, a.v[i], o);
    a = combine_rec<NP, S0, S1>(a, b);
  }
  return a;
}

// The cluster's record from each warp's (lane 0 of every warp passes its own): warp 0 combines
// the block's warps, pushes the block's record to every block of the cluster (the same slot,
// `rank`, in each) and combines the cs records it receives in rank order, the same in every
// block. Every thread gets the result. bar: this block's mbarrier expecting the cs pushes (unused
// for a one-block cluster, which takes its own record).
template <int NP, int S0, int S1>
__device__ __forceinline__ PairRec cluster_rec(const PairRec& mine, PairRec* warp_recs, PairRec* peer,
                                               unsigned long long* bar, PairRec& out, int cs, int rank) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) warp_recs[warp] = mine;
  __syncthreads();
  if (warp == 0) {
    PairRec b = warp_combine_rec<NP, S0, S1>(lane < nw ? warp_recs[lane] : empty_rec(), nw);
    if (cs == 1) {
      if (lane == 0) out = b;
    } else {
      if (lane == 0) {
        const uint32_t* w = reinterpret_cast<const uint32_t*>(b.v);
        for (int dst = 0; dst < cs; ++dst) {
          const uint32_t slot = peer_addr(&peer[rank], dst), rbar = peer_addr(bar, dst);
#pragma unroll
          for (int q = 0; q < kRec / 4; ++q)
            st_async_v4(slot + 16 * q, rbar, w[4 * q], w[4 * q + 1], w[4 * q + 2], w[4 * q + 3]);
        }
      }
      mbar_wait(bar, 0);
      const PairRec c = warp_combine_rec<NP, S0, S1>(lane < cs ? peer[lane] : empty_rec(), cs);
      if (lane == 0) out = c;
    }
  }
  __syncthreads();
  return out;
}

template <typename T, typename U, int MODE>
__global__ void __launch_bounds__(kPairThreads) distill_smem_kernel(DistillRowsArgs a, int slice) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int G = 16 / sizeof(T);  // elements a group: one 16-byte vector of the student row
  constexpr bool FAST = sizeof(T) == 2;
  extern __shared__ __align__(128) unsigned char pair_smem[];
  __shared__ PairRec warp_recs[32];
  __shared__ alignas(16) PairRec peer1[kMaxCluster], peer2[kMaxCluster];
  __shared__ PairRec row1, row2;
  __shared__ alignas(8) unsigned long long load_bar, bar1, bar2;
  const int cs = static_cast<int>(cluster_nctarank()), rank = static_cast<int>(cluster_ctarank());
  const int64_t r = blockIdx.x / cs;
  const int64_t V = a.cols, Vs = a.student_cols;
  const int64_t base = static_cast<int64_t>(rank) * slice;
  const int lim = static_cast<int>(V - base < slice ? (V - base > 0 ? V - base : 0) : slice);
  const int ng = lim / G;  // V is a multiple of G on this path
  const int t = threadIdx.x, NT = blockDim.x, warp = t >> 5;
  T* srow = static_cast<T*>(a.s) + r * a.s_row_stride + base;
  const U* trow = static_cast<const U*>(a.t) + r * a.t_row_stride + base;
  const int64_t y = a.target ? a.target[r] : -1;
  const bool valid = a.target == nullptr || y != a.ignore_index;
  const bool grad = a.scales != nullptr;
  if (!valid && (a.mask_soft || MODE == kKl)) {  // the same branch in every block of the cluster
    if (grad)
      for (int gi = t; gi < ng; gi += NT) {
        Vec<T, G> z;
#pragma unroll
        for (int e = 0; e < G; ++e) z.v[e] = from_float<T>(0.f);
        store_16B_words(srow + static_cast<int64_t>(gi) * G, z);
      }
    if (rank == 0 && t == 0) a.soft[r] = a.hard[r] = 0.f;
    return;
  }
  const float invT = a.inv_temperature, beta = a.beta;
  const bool hard = MODE != kKl && valid && a.target != nullptr && a.with_hard;
  const bool sep_hard = hard && (MODE == kCosine || invT != 1.f || Vs != V);
  const size_t s_bytes = static_cast<size_t>(lim) * sizeof(T), t_bytes = static_cast<size_t>(lim) * sizeof(U);
  const T* ss = reinterpret_cast<const T*>(pair_smem);
  const size_t t_off = pair_t_offset(slice, sizeof(T));
  const U* ts = reinterpret_cast<const U*>(pair_smem + t_off);
  if (t == 0) {
    mbar_init(&load_bar);
    mbar_init(&bar1);
    mbar_init(&bar2);
    fence_mbar_init();
    fence_proxy_async_smem();
    mbar_expect_tx(&load_bar, static_cast<uint32_t>(s_bytes + t_bytes));
    if (cs > 1) {
      mbar_expect_tx(&bar1, static_cast<uint32_t>(cs * sizeof(PairRec)));
      mbar_expect_tx(&bar2, static_cast<uint32_t>(cs * sizeof(PairRec)));
    }
  }
  __syncthreads();           // load_bar is initialised before any thread waits on it
  cluster_arrive_relaxed();  // peers push only after the wait in cluster_rec: every bar is ready
  if (warp < 2) {            // warp 0 copies the student's slice, warp 1 the teacher's
    const uint32_t bytes = static_cast<uint32_t>(warp == 0 ? s_bytes : t_bytes);
    unsigned char* dst = warp == 0 ? pair_smem : pair_smem + t_off;
    const unsigned char* src = warp == 0 ? reinterpret_cast<const unsigned char*>(srow)
                                         : reinterpret_cast<const unsigned char*>(trow);
    for (uint32_t c = static_cast<uint32_t>(t & 31) * kPairChunkBytes; c < bytes; c += 32u * kPairChunkBytes)
      bulk_copy_g2s(dst + c, src + c, bytes - c < kPairChunkBytes ? bytes - c : kPairChunkBytes, &load_bar);
  }
  const int64_t yl = y - base;  // the target's index in this slice (may be outside it)
  const bool owns_y = hard && y >= 0 && y < Vs && yl >= 0 && yl < lim;
  mbar_wait(&load_bar, 0);

  // Pass 1, on chip: each warp's maxima, then the sums relative to them (one FFMA and one MUFU an
  // element for 2-byte logits), as the cross entropy's kernels.
  // Each loop is compiled for the hard softmax's case: none, over the row (kHardRow) or over the
  // student's Vs columns (kHardMasked, the only one that needs each element's column).
  constexpr int kHardNone = 0, kHardRow = 1, kHardMasked = 2;
  const bool hard_masked = sep_hard && Vs < V;  // the student's padding is outside the hard softmax
  auto by_hard = [&](auto&& body) {
    if (!sep_hard)
      body(std::integral_constant<int, kHardNone>{});
    else if (hard_masked)
      body(std::integral_constant<int, kHardMasked>{});
    else
      body(std::integral_constant<int, kHardRow>{});
  };
  float ms = -INFINITY, mt = -INFINITY, mh = -INFINITY;
  by_hard([&](auto hk) {
    if constexpr (decltype(hk)::value != kHardMasked) {
#pragma unroll 2
      for (int gi = t; gi < ng; gi += NT) {  // packed maxima of 16-byte vectors
        ms = max_nan(ms, vec_max(load_vec<T, G>(ss + gi * G)));
        if constexpr (MODE == kJsd) mt = max_nan(mt, vec_max(load_vec<U, G>(ts + gi * G)));
      }
    } else {
#pragma unroll 2
      for (int gi = t; gi < ng; gi += NT) {
        float sf[G], tf[G];
        load_floats<T, G>(ss + gi * G, sf);
        if constexpr (MODE == kJsd) load_floats<U, G>(ts + gi * G, tf);
#pragma unroll
        for (int e = 0; e < G; ++e) {
          ms = max_nan(ms, sf[e]);
          if constexpr (MODE == kJsd) mt = max_nan(mt, tf[e]);
          if (base + gi * G + e < Vs) mh = max_nan(mh, sf[e]);
        }
      }
    }
  });
  ms = warp_max_nan(ms);
  if (MODE == kJsd) mt = warp_max_nan(mt);
  mh = !sep_hard ? -INFINITY : (hard_masked ? warp_max_nan(mh) : ms);
  // maxima in the tempered units (invT > 0 keeps the order)
  const float mzs = ms * invT, mzt = mt * invT;
  const float c2 = invT * kLog2e;
  const float offs = ms == -INFINITY ? 0.f : mzs * kLog2e, offt = mt == -INFINITY ? 0.f : mzt * kLog2e,
              offh = mh == -INFINITY ? 0.f : mh * kLog2e;
  float sum_s = 0.f, sum_t = 0.f, sum_h = 0.f, p0 = 0.f, p1 = 0.f, p2 = 0.f;
  by_hard([&](auto hk) {
    constexpr int HK = decltype(hk)::value;
#pragma unroll 2
    for (int gi = t; gi < ng; gi += NT) {
      float sf[G], tf[G];
      load_floats<T, G>(ss + gi * G, sf);
      load_floats<U, G>(ts + gi * G, tf);
#pragma unroll
      for (int e = 0; e < G; ++e) {
        if (MODE == kCosine) {
          const float zs = sf[e] * invT, zt = tf[e] * invT;
          p0 += zs * zs;
          p1 += zt * zt;
          p2 += zs * zt;
        } else {
          sum_s += FAST ? ex2(fmaf(sf[e], c2, -offs)) : (ms == -INFINITY ? 0.f : expf(sf[e] * invT - mzs));
          if (MODE == kJsd)
            sum_t += FAST ? ex2(fmaf(tf[e], c2, -offt)) : (mt == -INFINITY ? 0.f : expf(tf[e] * invT - mzt));
          else
            p0 += tf[e];  // KL: sum q
        }
        if (HK == kHardRow || (HK == kHardMasked && base + gi * G + e < Vs))
          sum_h += FAST ? ex2(fmaf(sf[e], kLog2e, -offh)) : (mh == -INFINITY ? 0.f : expf(sf[e] - mh));
      }
    }
  });
  cluster_wait();  // every block's barriers are initialised (long since, by now) before any push
  PairRec w = empty_rec();
  w.v[0] = MODE == kCosine ? -INFINITY : mzs;
  w.v[1] = warp_sum(sum_s);
  w.v[2] = MODE == kJsd ? mzt : -INFINITY;
  w.v[3] = warp_sum(sum_t);
  w.v[4] = sep_hard ? mh : -INFINITY;
  w.v[5] = warp_sum(sum_h);
  w.v[9] = warp_sum(p0);
  w.v[10] = warp_sum(p1);
  w.v[11] = warp_sum(p2);
  // The exchange's fields: JSD the three (max, sum) pairs, KL the student's pair and sum q, cosine
  // the hard pair and the three dot products.
  constexpr int kNp = MODE == kKl ? 1 : 3, kS1 = MODE == kJsd ? 9 : (MODE == kKl ? 10 : 12);
  const PairRec st = cluster_rec<kNp, 9, kS1>(w, warp_recs, peer1, &bar1, row1, cs, rank);
  // Row constants. Log-probabilities l = log p are formed as (z - m) - log s (z - m first, exact
  // near the max) in float32; for 2-byte logits in log2 units instead, l2 = x c2 - (m log2 e +
  // log2 s) with one FFMA, so that exp and log are the MUFU's ex2 / lg2 with no conversion (the
  // cross entropy's fast path rounds its offset the same way); the row sums are then in log2 units
  // and scaled by ln 2 once (`unit`).
  const float lss = logf(st.v[1]), lst = logf(st.v[3]);
  const float mh_r = sep_hard ? st.v[4] : st.v[0], lsh = sep_hard ? logf(st.v[5]) : lss;
  const float unit = FAST ? kLn2 : 1.f;
  const float offs2 = FAST ? fmaf(st.v[0], kLog2e, __log2f(st.v[1])) : 0.f;
  const float offt2 = FAST ? fmaf(st.v[2], kLog2e, __log2f(st.v[3])) : 0.f;
  const float offh2 = FAST ? fmaf(mh_r, kLog2e, __log2f(sep_hard ? st.v[5] : st.v[1])) : 0.f;
  // l of a student / teacher / hard element (raw value x), exp and log in the same units
  auto l_s = [&](float x) { return FAST ? fmaf(x, c2, -offs2) : (x * invT - st.v[0]) - lss; };
  auto l_t = [&](float x) { return FAST ? fmaf(x, c2, -offt2) : (x * invT - st.v[2]) - lst; };
  auto l_h = [&](float x) { return FAST ? fmaf(x, kLog2e, -offh2) : (x - mh_r) - lsh; };
  auto ex = [](float l) { return FAST ? ex2(l) : expf(l); };
  auto lg = [](float v) {
    if constexpr (FAST) {
      float r;
      asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
      return r;
    }
    return logf(v);
  };
  float nu = 1.f, nv = 1.f, cc = 0.f;
  if (MODE == kCosine) {
    nu = fmaxf(sqrtf(st.v[9]), 1e-12f);
    nv = fmaxf(sqrtf(st.v[10]), 1e-12f);
    cc = st.v[11] / (nu * nv);
  }
  const float Q = st.v[9];  // KL
  if (owns_y && t == 0) {   // the block holding the target writes the hard loss
    const float x_y = to_float<T>(ss[yl]);
    a.hard[r] = (mh_r + lsh) - x_y;
  }
  if (rank == 0 && t == 0) {
    if (!hard) a.hard[r] = 0.f;
    if (hard && (y < 0 || y >= Vs)) a.hard[r] = NAN;  // an invalid target: no block holds it
  }

  // Passes 2 and 3 are compiled once per uniform case (beta 0, 1 or between; the hard term and the
  // student's padding present or not), so that each element's code has no branch and the eight
  // elements of a group interleave.
  using B0 = std::integral_constant<int, 0>;
  using B1 = std::integral_constant<int, 1>;
  using BMix = std::integral_constant<int, 2>;
  auto by_beta = [&](auto&& body) {
    if (MODE != kJsd || (beta != 0.f && beta != 1.f))
      body(BMix{});
    else if (beta == 0.f)
      body(B0{});
    else
      body(B1{});
  };

  // Pass 2 (JSD, unless beta is 0 with a gradient): the loss and K = sum S (l S - l M), in l units.
  const bool late_sum = MODE == kKl || (MODE == kJsd && beta == 0.f && grad);
  float soft = MODE == kCosine ? beta * (1.f - cc) : 0.f, K = 0.f;
  if (MODE == kJsd && !late_sum) {
    float acc = 0.f, acck = 0.f;
    by_beta([&](auto bk) {
      constexpr int BK = decltype(bk)::value;
#pragma unroll 2
      for (int gi = t; gi < ng; gi += NT) {
        float sf[G], tf[G];
        load_floats<T, G>(ss + gi * G, sf);
        load_floats<U, G>(ts + gi * G, tf);
#pragma unroll
        for (int e = 0; e < G; ++e) {
          const float lS = l_s(sf[e]), lP = l_t(tf[e]);
          const float S = ex(lS), P = ex(lP);
          if (BK == 0) {
            acc += pdiff(P, lP, lS);
          } else if (BK == 1) {
            acc += pdiff(S, lS, lP);
          } else {
            // log-probabilities floored at kLogFloor: 0 x (l - l') is then 0 where a probability
            // is 0 (a -inf logit, an underflow), without a select; max.NaN keeps a NaN.
            const float fS = max_nan(lS, kLogFloor), fP = max_nan(lP, kLogFloor);
            const float M = fmaf(beta, P, (1.f - beta) * S);
            const float lM = max_nan(lg(M), kLogFloor);
            acc += P * (fP - lM);  // beta's part, scaled after the loop
            acck += S * (fS - lM);
          }
        }
      }
    });
    if (MODE == kJsd && beta != 0.f && beta != 1.f) acc = beta * acc + (1.f - beta) * acck;
    PairRec w2 = empty_rec();
    w2.v[9] = warp_sum(acc);
    w2.v[10] = warp_sum(acck);
    const PairRec sums = cluster_rec<0, 9, 11>(w2, warp_recs, peer2, &bar2, row2, cs, rank);
    soft = unit * sums.v[9];
    K = beta == 1.f ? sums.v[9] : (beta == 0.f ? 0.f : sums.v[10]);
  }
  if (!grad && !late_sum) {
    if (rank == 0 && t == 0) a.soft[r] = soft;
    return;
  }

  // Pass 3: the gradient from the copies on chip, one 16-byte store a group (KL's loss and JSD's
  // at beta 0 summed on the way). The hard term (a weight and a target) and the student's padding
  // (Vs < V) need each element's column: kHard (the hard softmax is the soft one) or kHardSep (its
  // own: a temperature, cosine, or the padding); else kPlain.
  constexpr int kPlain = 0, kHard = 1, kHardSep = 2;
  const float cs_ = grad ? a.scales[0] * invT : 0.f, ch = hard && grad ? a.scales[1] : 0.f;
  const float cmix = cs_ * (1.f - beta) * unit, c1 = cs_ * unit;  // JSD's factors of S (l diff - K)
  float acc0 = 0.f;
  auto grad_pass = [&](auto bk, auto general) {
    constexpr int BK = decltype(bk)::value;
    constexpr int GEN = decltype(general)::value;
#pragma unroll 2
    for (int gi = t; gi < ng; gi += NT) {
      float sf[G], tf[G];
      load_floats<T, G>(ss + gi * G, sf);
      load_floats<U, G>(ts + gi * G, tf);
      Vec<T, G> out;
#pragma unroll
      for (int e = 0; e < G; ++e) {
        float d = 0.f, S = 0.f;
        if (MODE == kCosine) {
          const float zs = sf[e] * invT, zt = tf[e] * invT;
          d = cs_ * (-beta) * (zt / (nu * nv) - cc * zs / (nu * nu));
        } else if (MODE == kKl) {
          const float lS = l_s(sf[e]), q = tf[e];
          S = ex(lS);
          acc0 += q * (lg(fmaxf(q, a.eps)) - lS);
          d = cs_ * (S * Q - q);
        } else {
          const float lS = l_s(sf[e]), lP = l_t(tf[e]);
          S = ex(lS);
          if (BK == 0) {
            const float P = ex(lP);
            acc0 += pdiff(P, lP, lS);
            d = cs_ * (S - P);
          } else if (BK == 1) {
            const float v = c1 * (S * ((lS - lP) - K));
            d = S > 0.f ? v : 0.f;
          } else {
            const float P = ex(lP);
            const float M = fmaf(beta, P, (1.f - beta) * S);
            const float lM = max_nan(lg(M), kLogFloor);
            d = cmix * (S * ((max_nan(lS, kLogFloor) - lM) - K));  // as pass 2: 0 where S is 0
          }
        }
        if constexpr (GEN != kPlain) {
          const int64_t j = base + gi * G + e;
          const float p = GEN == kHardSep ? ex(l_h(sf[e])) : S;
          d += ch * (j == y ? p - 1.f : p);
          out.v[e] = from_float<T>(j < Vs ? d : 0.f);
        } else {
          out.v[e] = from_float<T>(d);
        }
      }
      if (grad) store_16B_words(srow + static_cast<int64_t>(gi) * G, out);  // one 16-byte store
    }
  };
  by_beta([&](auto bk) {
    if (ch == 0.f && Vs == V)
      grad_pass(bk, std::integral_constant<int, kPlain>{});
    else if (sep_hard)
      grad_pass(bk, std::integral_constant<int, kHardSep>{});
    else
      grad_pass(bk, std::integral_constant<int, kHard>{});
  });
  if (late_sum) {
    PairRec w2 = empty_rec();
    w2.v[9] = warp_sum(acc0);
    soft = unit * cluster_rec<0, 9, 10>(w2, warp_recs, peer2, &bar2, row2, cs, rank).v[9];
  }
  if (rank == 0 && t == 0) a.soft[r] = soft;
#else
  __trap();  // the host launches this kernel only where its sm_90 code runs
#endif
}

// ---------------------------------------------------------------------------------------- logprob

template <typename T, int VE, bool ENT>
__device__ __forceinline__ void logprob_fwd_row(const LogprobRowsArgs& a, const T* z, int64_t r, int64_t y,
                                                float* scratch) {
  constexpr bool FAST = sizeof(T) == 2;
  const int64_t V = a.cols, step = static_cast<int64_t>(blockDim.x) * VE;
  const float c = a.z_scale, k = c * kLog2e;
  OnlineRow<FAST, ENT> o;
  auto add = [&](const Vec<T, VE>& v) {
    float x[VE];
#pragma unroll
    for (int e = 0; e < VE; ++e) x[e] = to_float<T>(v.v[e]);
    o.add(x, c, k);
  };
  // Two vectors a trip, both loads issued before either is used: twice the bytes in flight.
  int64_t j0 = static_cast<int64_t>(threadIdx.x) * VE;
  for (; j0 + step < V; j0 += 2 * step) {
    const Vec<T, VE> v0 = load_vec<T, VE>(z + j0), v1 = load_vec<T, VE>(z + j0 + step);
    add(v0);
    add(v1);
  }
  if (j0 < V) add(load_vec<T, VE>(z + j0));
  const float M = block_max(o.m, scratch);  // raw units
  const float dm = o.m == -INFINITY ? 0.f : (o.m - M) * c;
  const float f = o.m == -INFINITY ? 0.f : expf(dm);
  const float s = block_sum(o.s * f, scratch);
  const float u = ENT ? block_sum(f * fmaf(dm, o.s, o.u), scratch) : 0.f;
  if (threadIdx.x == 0) {
    const float log_s = logf(s);
    a.logp[r] = (to_float<T>(z[y]) - M) * c - log_s;
    if (ENT) a.entropy[r] = log_s - u / s;
    if (a.stats) {
      a.stats[2 * r] = M * c;  // the scaled row's max (c > 0: max(c x) = c max(x))
      a.stats[2 * r + 1] = log_s;
    }
  }
}

// Two 1024-thread blocks an SM (32 registers a thread): left to itself the compiler took 46-48 for
// the 16-byte loop and one block an SM ran, 0.923 against 0.871 ms at 32 (H100, the bench below).
template <typename T, int VE>
__global__ void __launch_bounds__(kMaxThreads, 2) logprob_fwd_kernel(LogprobRowsArgs a) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T* z = static_cast<const T*>(a.z) + r * a.row_stride;
    const int64_t y = a.target[r];
    if (y == a.ignore_index) {
      if (threadIdx.x == 0) {
        a.logp[r] = 0.f;
        if (a.entropy) a.entropy[r] = 0.f;
        if (a.stats) a.stats[2 * r] = a.stats[2 * r + 1] = 0.f;
      }
      continue;
    }
    if (a.entropy)
      logprob_fwd_row<T, VE, true>(a, z, r, y, scratch);
    else
      logprob_fwd_row<T, VE, false>(a, z, r, y, scratch);
  }
}

template <typename T, int VE>
__global__ void __launch_bounds__(kMaxThreads) logprob_bwd_kernel(LogprobRowsArgs a) {
  const int64_t V = a.cols;
  const int64_t step = static_cast<int64_t>(blockDim.x) * VE,
                j_first = static_cast<int64_t>(threadIdx.x) * VE;
  const float c = a.z_scale;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T* z = static_cast<const T*>(a.z) + r * a.row_stride;
    T* dz = a.dz ? static_cast<T*>(a.dz) + r * a.dz_row_stride : static_cast<T*>(a.z) + r * a.row_stride;
    const int64_t y = a.target[r];
    if (y == a.ignore_index) {
      zero_row<T, VE>(dz, V);
      continue;
    }
    const float M = a.stats[2 * r], log_s = a.stats[2 * r + 1];
    const float glp = a.g_lp ? a.g_lp[r] * a.scale : 0.f;
    const float gent = a.g_ent ? a.g_ent[r] * a.scale : 0.f;
    const float mu = M + (log_s - (a.entropy ? a.entropy[r] : 0.f));  // sum p z = lse - entropy
    for (int64_t j0 = j_first; j0 < V; j0 += step) {
      const Vec<T, VE> v = load_vec<T, VE>(z + j0);
      Vec<T, VE> out;
#pragma unroll
      for (int e = 0; e < VE; ++e) {
        const float x = to_float<T>(v.v[e]) * c;
        const float p = expf((x - M) - log_s);
        float d = -glp * (j0 + e == y ? p - 1.f : p);
        if (gent != 0.f) d -= gent * p * (x - mu);
        out.v[e] = from_float<T>(d);
      }
      store_vec<T, VE>(dz + j0, out);
    }
  }
}

// ------------------------------------------------------------------------------------- pointwise

template <typename T, int VE>
__global__ void __launch_bounds__(kMaxThreads) pointwise_kernel(PointwiseDivArgs a) {
  __shared__ float scratch[32];
  const int64_t V = a.cols;
  const float beta = a.beta, eps = a.eps;
  const float scale = a.grad ? a.grad_scale[0] : 0.f;
  const int64_t step = static_cast<int64_t>(blockDim.x) * VE,
                j_first = static_cast<int64_t>(threadIdx.x) * VE;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T* x = static_cast<const T*>(a.x) + r * a.x_row_stride;
    const T* yv = static_cast<const T*>(a.y) + r * a.y_row_stride;
    T* g = a.grad ? static_cast<T*>(a.grad) + r * a.grad_row_stride : nullptr;
    float* le = a.loss_elems ? a.loss_elems + r * V : nullptr;
    const bool ignored = a.labels != nullptr && a.labels[r] == a.ignore_index;
    float acc = 0.f;
    for (int64_t j0 = j_first; j0 < V; j0 += step) {
      const Vec<T, VE> xv = load_vec<T, VE>(x + j0), tv = load_vec<T, VE>(yv + j0);
      Vec<T, VE> gv;
#pragma unroll
      for (int e = 0; e < VE; ++e) {
        const float xi = to_float<T>(xv.v[e]), yi = to_float<T>(tv.v[e]);
        float l = 0.f, d = 0.f;
        if (!ignored) {
          if (a.kind == 0) {
            const float P = expf(yi), Q = expf(xi);
            if (beta == 0.f) {
              l = pdiff(P, yi, xi);
              d = -P;
            } else if (beta == 1.f) {
              l = pdiff(Q, xi, yi);
              d = l + Q;
            } else {
              const float lM = logaddexp(logf(beta) + yi, log1pf(-beta) + xi);
              // beta P y + (1 - beta) Q x - M log M = beta P (y - log M) + (1 - beta) Q (x - log M)
              const float lq = pdiff(Q, xi, lM);
              l = beta * pdiff(P, yi, lM) + (1.f - beta) * lq;
              d = (1.f - beta) * lq;
            }
          } else if (a.kind == 1) {
            if (a.log_target) {
              const float P = expf(yi);
              l = P * (yi - xi);
              d = -P;
            } else {
              l = yi * (logf(fmaxf(yi, eps)) - xi);
              d = -yi;
            }
          } else {
            l = 0.5f * fabsf(xi - yi);
            d = xi > yi ? 0.5f : (xi < yi ? -0.5f : 0.f);
          }
        }
        if (le) le[j0 + e] = l;
        acc += l;
        gv.v[e] = from_float<T>(d * scale);
      }
      if (g) store_vec<T, VE>(g + j0, gv);
    }
    if (a.loss_rows) {
      const float total = block_sum(acc, scratch);
      if (threadIdx.x == 0) a.loss_rows[r] = total;
    }
  }
}

}  // namespace

namespace {

// The plan of one distillation row step: on sm_90 (the smem kernel's sm_90 code runs on this
// device), for 16-byte aligned rows of at least kPairMinCols elements whose slices fit, the smem
// cluster kernel; else a block per row. plan_override distill=block|smem forces a kernel where it
// can run, distill_smem_blocks=1|2|4|8 the smem kernel's blocks per row.
constexpr int64_t kPairMinCols = 2048;
// The smem kernel's blocks per row: the fewest (a power of two, at most 8) whose slice of the
// row pair fits kPairAutoBytes (two blocks an SM), else 16 (non-portable) where that fits it and
// the device takes such clusters (a float32 target beside 2-byte logits at V 151936), else 8; above
// kPairMaxBytes a block per row. Blocks of up to 512 threads. A/B on an H100
// (docs/kernels/rl_losses.md): JSD at 4 or 16 blocks a row and 256-thread blocks were slower.
constexpr int64_t kPairAutoBytes = 80 * 1024;
constexpr size_t kPairMaxBytes = 200 * 1024;

enum class DistillKernel : int { kBlock = 0, kSmem = 1 };

struct DistillPlan {
  DistillKernel kernel;
  bool vec;     // block kernel: 16-byte accesses
  int threads;  // per block
  int cluster;  // smem kernel: blocks per row
  int slice;    // smem kernel: elements of each row a block
  size_t smem;  // smem kernel: dynamic shared memory a block
};

// The smem kernel of a call's loss. A float32 teacher beside 16-bit logits comes with loss 2 only
// (divergence.h; distill_rows refuses it otherwise): that pair has only the KL build.
template <typename T, typename U>
auto* smem_kernel(int loss) {
  if constexpr (!std::is_same_v<T, U>) {
    return distill_smem_kernel<T, U, kKl>;
  } else {
    return loss == kCosine ? distill_smem_kernel<T, U, kCosine>
                           : (loss == kKl ? distill_smem_kernel<T, U, kKl> : distill_smem_kernel<T, U, kJsd>);
  }
}

template <typename T, typename U>
bool plan_smem(const DistillRowsArgs& a, DistillPlan& p) {
  constexpr int G = 16 / sizeof(T);
  const int64_t V = a.cols;
  const void* f = reinterpret_cast<const void*>(smem_kernel<T, U>(a.loss));
  auto slice_for = [&](int64_t c) { return ceil_div(ceil_div(V, c), int64_t{G}) * G; };
  auto bytes_for = [&](int64_t c) {
    return pair_t_offset(static_cast<int>(slice_for(c)), sizeof(T)) +
           static_cast<size_t>(slice_for(c)) * sizeof(U);
  };
  auto threads_for_cs = [&](int64_t c) {
    return static_cast<int>(
        std::min<int64_t>(kPairThreads, std::max<int64_t>(64, ceil_div(slice_for(c) / G, 32) * 32)));
  };
  const int forced = plan_override::forced(plan_override::Key::kDistillSmemBlocks);
  int64_t cs = forced >= 0 ? int64_t{1} << forced : 0;
  if (cs > kMaxPortableCluster && !allow_nonportable_clusters(f)) cs = kMaxPortableCluster;
  for (int64_t c = 1; cs == 0 && c <= kMaxPortableCluster; c *= 2)
    if (static_cast<int64_t>(bytes_for(c)) <= kPairAutoBytes) cs = c;
  if (cs == 0) {
    const size_t b16 = bytes_for(kMaxCluster);
    const bool sixteen =
        static_cast<int64_t>(b16) <= kPairAutoBytes && allow_nonportable_clusters(f) &&
        raise_max_dynamic_smem(f, b16) &&
        active_clusters(smem_kernel<T, U>(a.loss), threads_for_cs(kMaxCluster), kMaxCluster, b16) >= 1;
    cs = sixteen ? kMaxCluster : kMaxPortableCluster;
  }
  const size_t smem = bytes_for(cs);
  if (a.rows * cs > INT32_MAX || smem > kPairMaxBytes || !raise_max_dynamic_smem(f, smem)) return false;
  prefer_max_shared_carveout(f);
  p.kernel = DistillKernel::kSmem;
  p.threads = threads_for_cs(cs);
  p.cluster = static_cast<int>(cs);
  p.slice = static_cast<int>(slice_for(cs));
  p.smem = smem;
  return true;
}

template <typename T, typename U>
DistillPlan plan_distill(const DistillRowsArgs& a) {
  constexpr int VE = 16 / sizeof(T);
  DistillPlan p{};
  const bool aligned =
      rows_aligned<T>(a.s, a.s_row_stride, a.cols) && rows_aligned<U>(a.t, a.t_row_stride, a.cols);
  const int forced = plan_override::forced(plan_override::Key::kDistill);
  const bool sm90_code = binary_version(reinterpret_cast<const void*>(distill_smem_kernel<T, U, kKl>)) >= 90;
  if (forced != static_cast<int>(DistillKernel::kBlock) && aligned && sm90_code && a.cols >= kPairMinCols &&
      plan_smem<T, U>(a, p))
    return p;
  p.kernel = DistillKernel::kBlock;
  p.vec = aligned;
  p.threads = threads_for(a.cols, aligned ? VE : 1);
  p.cluster = 1;
  return p;
}

template <typename T, typename U>
cudaError_t launch_distill(const DistillPlan& p, const DistillRowsArgs& a, cudaStream_t stream) {
  constexpr int VE = 16 / sizeof(T);
  if (p.kernel == DistillKernel::kBlock) {
    // A block per row (a persistent grid sized to keep the rows in L2 lost: docs/kernels/rl_losses.md).
    if (p.vec)
      distill_kernel<T, U, VE><<<grid_for(a.rows), p.threads, 0, stream>>>(a);
    else
      distill_kernel<T, U, 1><<<grid_for(a.rows), p.threads, 0, stream>>>(a);
    return cudaGetLastError();
  }
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg = cluster_launch_config(p.threads, p.cluster, p.smem, stream, attr);
  cfg.gridDim = dim3(static_cast<unsigned>(a.rows * p.cluster));
  return cudaLaunchKernelEx(&cfg, smem_kernel<T, U>(a.loss), a, p.slice);
}

}  // namespace

cudaError_t distill_rows(const DistillRowsArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    // The teacher row: the student's dtype, or float32 probabilities (KL) beside 2-byte logits.
    if constexpr (!std::is_same_v<T, float>) {
      if (a.t_dtype == DType::kFloat32) {
        if (a.loss != kKl) return cudaErrorInvalidValue;
        return launch_distill<T, float>(plan_distill<T, float>(a), a, stream);
      }
    }
    if (a.t_dtype != a.dtype) return cudaErrorInvalidValue;
    return launch_distill<T, T>(plan_distill<T, T>(a), a, stream);
  });
}

cudaError_t logprob_rows_fwd(const LogprobRowsArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int VE = 16 / sizeof(T);
    if (rows_aligned<T>(a.z, a.row_stride, a.cols))
      logprob_fwd_kernel<T, VE>
          <<<grid_for(a.rows), threads_for_rows(a.rows, a.cols, VE, a.sm_count), 0, stream>>>(a);
    else
      logprob_fwd_kernel<T, 1>
          <<<grid_for(a.rows), threads_for_rows(a.rows, a.cols, 1, a.sm_count), 0, stream>>>(a);
    return cudaGetLastError();
  });
}

cudaError_t logprob_rows_bwd(const LogprobRowsArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int VE = 16 / sizeof(T);
    if (rows_aligned<T>(a.z, a.row_stride, a.cols) && rows_aligned<T>(a.dz, a.dz_row_stride, a.cols))
      logprob_bwd_kernel<T, VE><<<grid_for(a.rows), threads_for(a.cols, VE), 0, stream>>>(a);
    else
      logprob_bwd_kernel<T, 1><<<grid_for(a.rows), threads_for(a.cols, 1), 0, stream>>>(a);
    return cudaGetLastError();
  });
}

cudaError_t pointwise_div_rows(const PointwiseDivArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int VE = 16 / sizeof(T);
    const bool vec = rows_aligned<T>(a.x, a.x_row_stride, a.cols) &&
                     rows_aligned<T>(a.y, a.y_row_stride, a.cols) &&
                     rows_aligned<T>(a.grad, a.grad_row_stride, a.cols);
    if (vec)
      pointwise_kernel<T, VE>
          <<<grid_for(a.rows), threads_for_rows(a.rows, a.cols, VE, a.sm_count), 0, stream>>>(a);
    else
      pointwise_kernel<T, 1>
          <<<grid_for(a.rows), threads_for_rows(a.rows, a.cols, 1, a.sm_count), 0, stream>>>(a);
    return cudaGetLastError();
  });
}

}  // namespace liger_cpp::kernels
