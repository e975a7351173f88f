// The shared-memory cluster kernel (sm_90; the default row kernel there): the
// register cluster kernel's split of a row over CS blocks and its exchange of
// statistics, but each block's slice is copied into its shared memory by the
// TMA engine (cp.async.bulk, a few instructions per block, completing on an
// mbarrier) instead of into registers. Shared memory holds up to 227 KiB a
// block, and with few registers per thread more blocks share an SM, so more
// rows are in flight and one block's reduce and exchange overlap other blocks'
// loads. Statistics and gradient are computed exactly as the register kernel
// does (the warp max first, then the sum relative to it, in the same element
// order per thread).
#pragma once

#include "kernels/cross_entropy/ce_cluster_common.cuh"

namespace liger_cpp::kernels {
namespace {

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

}  // namespace
}  // namespace liger_cpp::kernels
