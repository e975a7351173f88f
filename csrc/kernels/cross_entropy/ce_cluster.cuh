// The register cluster kernel (sm_90): a cluster of CS blocks per row, each
// thread holding its K 16-byte vectors of the block's slice in registers (vector
// k at slice index k * blockDim.x + threadIdx.x), so the row is read once and
// its gradient written from the registers. It holds at most 128 KiB of a row an
// SM (64 registers x 2048 threads, half of them data): the shared-memory kernel
// (ce_smem.cuh) replaced it as the default, and it runs where that kernel's
// slice does not fit the device's shared memory.
#pragma once

#include "kernels/cross_entropy/ce_cluster_common.cuh"

namespace liger_cpp::kernels {
namespace {

constexpr int kClusterThreads = 512;  // most threads per block
constexpr int kClusterK = 8;          // 16-byte vectors per thread

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

}  // namespace
}  // namespace liger_cpp::kernels
