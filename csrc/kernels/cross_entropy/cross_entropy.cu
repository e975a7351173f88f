// Cross-entropy: the launch plan of the row step and its launch, and the
// gradient scaling (cross_entropy.h; the kernels: ce_two_pass.cuh,
// ce_cluster.cuh, ce_smem.cuh; which runs for which shape, and the
// measurements behind the plan: docs/kernels/cross_entropy.md).
//
// The gradient of a row needs the row's log-sum-exp, which needs the whole row:
// a plain kernel reads each row twice (statistics, then gradient) and writes it
// once, so it cannot pass 2/3 of the copy bandwidth counted as one read and one
// write. On sm_90 the row instead stays on chip: a cluster of blocks splits the
// row, keeps its slices in shared memory (ce_smem_kernel, the default) or in
// registers (ce_cluster_kernel, where a slice does not fit the device's shared
// memory), exchanges the partial statistics through distributed shared memory
// and writes the gradient from the copy on chip: one read and one write per
// element. Other architectures, rows that are not 16-byte aligned, rows under
// 2048 elements and rows too long for a cluster take the two-pass kernel.
#include <algorithm>
#include <cstdint>

#include "kernels/common/common.cuh"
#include "kernels/common/launch_cache.h"
#include "kernels/common/plan_override.h"
#include "kernels/cross_entropy/cross_entropy.h"

// The sm_90 kernels' helpers are unused in the sm_80 pass (their bodies compile only for sm_90).
#pragma nv_diag_suppress 177

#include "kernels/cross_entropy/ce_cluster.cuh"
#include "kernels/cross_entropy/ce_smem.cuh"
#include "kernels/cross_entropy/ce_two_pass.cuh"

namespace liger_cpp::kernels {
namespace {

// The smem kernel's blocks per row: the fewest (a power of two, at most 8) whose
// slice fits kSmemAutoBytes, else 8; a slice above kSmemMaxBytes (or above what
// the device grants) takes the register kernel. Too few blocks per row starve
// the SMs, too many split rows into slivers (docs/kernels/cross_entropy.md).
constexpr int64_t kSmemAutoBytes = 40 * 1024;
constexpr size_t kSmemMaxBytes = 200 * 1024;
// The register kernel's blocks per row: a power of two, the fewest that keep a
// block at most kClusterAutoThreads threads (the kernel is latency-bound: load,
// reduce, exchange, store per block); else kClusterThreads-thread blocks.
constexpr int kClusterAutoThreads = 320;

// The values of plan_override "ce", in order.
enum class CeKernel : int { kTwoPass = 0, kCluster = 1, kSmem = 2 };

// One call's launch of the row step.
struct CePlan {
  CeKernel kernel;
  bool vec;            // two-pass: 16-byte accesses (else one element an access)
  bool plain, argmax;  // the cluster kernels' build (see ce_cluster_kernel)
  int threads;         // per block
  int64_t cluster;     // blocks per row (a cluster; 1 for two-pass)
  int slice;           // cluster kernels: elements a block (the kernel's argument)
  size_t smem;         // smem kernel: dynamic shared memory a block
};

template <typename T>
auto* smem_kernel(bool plain, bool am) {
  return plain ? (am ? ce_smem_kernel<T, true, true> : ce_smem_kernel<T, true, false>)
               : (am ? ce_smem_kernel<T, false, true> : ce_smem_kernel<T, false, false>);
}

template <typename T>
auto* cluster_kernel(bool plain, bool am) {
  return plain ? (am ? ce_cluster_kernel<T, true, true> : ce_cluster_kernel<T, true, false>)
               : (am ? ce_cluster_kernel<T, false, true> : ce_cluster_kernel<T, false, false>);
}

// The smem kernel where its slice fits (opting the kernel in to that much
// shared memory and the largest carveout); false otherwise.
template <typename T>
bool plan_smem(const CeRowsArgs& a, CePlan& p) {
  constexpr int VE16 = 16 / sizeof(T);
  const int64_t V = a.cols;
  const void* f = reinterpret_cast<const void*>(smem_kernel<T>(p.plain, p.argmax));
  auto slice_for = [&](int64_t c) { return ceil_div(ceil_div(V, c), int64_t{VE16}) * VE16; };
  const int forced = plan_override::forced(plan_override::Key::kCeSmemBlocks);
  int64_t cs = forced >= 0 ? int64_t{1} << forced : 0;
  for (int64_t c = 1; cs == 0 && c <= kMaxPortableCluster; c *= 2)
    if (slice_for(c) * static_cast<int64_t>(sizeof(T)) <= kSmemAutoBytes) cs = c;
  if (cs == 0) cs = kMaxPortableCluster;
  const int64_t slice = slice_for(cs);
  const size_t smem = static_cast<size_t>(slice) * sizeof(T);
  if (a.rows * cs > INT32_MAX || smem > kSmemMaxBytes || !raise_max_dynamic_smem(f, smem)) return false;
  prefer_max_shared_carveout(f);
  p.kernel = CeKernel::kSmem;
  p.threads = kSmemThreads;
  p.cluster = cs;
  p.slice = static_cast<int>(slice);
  p.smem = smem;
  return true;
}

// The register kernel where a row fits a cluster of at most kMaxCluster blocks
// (above kMaxPortableCluster only where the device confirms that one fits);
// false otherwise.
template <typename T>
bool plan_cluster(const CeRowsArgs& a, CePlan& p) {
  constexpr int VE16 = 16 / sizeof(T);
  const int64_t V = a.cols;
  const int64_t per_thread = static_cast<int64_t>(kClusterK) * VE16;
  auto* kern = cluster_kernel<T>(p.plain, p.argmax);
  auto threads_for = [&](int64_t cs) {
    return static_cast<int>(ceil_div(ceil_div(V, cs * per_thread), 32) * 32);
  };
  auto fits = [&](int64_t cs) {
    if (cs > kMaxCluster || a.rows * cs > INT32_MAX) return false;
    if (cs <= kMaxPortableCluster) return true;
    const void* f = reinterpret_cast<const void*>(kern);
    return allow_nonportable_clusters(f) && active_clusters(kern, threads_for(cs), static_cast<int>(cs)) >= 1;
  };
  auto usable = [&](int64_t cs, int64_t max_threads) {
    return cs > 0 && threads_for(cs) <= max_threads && fits(cs);
  };
  int64_t cs = 0;
  for (int64_t c = 1; cs == 0 && c <= kMaxCluster; c *= 2)
    if (usable(c, kClusterAutoThreads)) cs = c;
  if (cs == 0 && usable(ceil_div(V, kClusterThreads * per_thread), kClusterThreads))
    cs = ceil_div(V, kClusterThreads * per_thread);
  if (cs == 0) return false;
  p.kernel = CeKernel::kCluster;
  p.threads = threads_for(cs);
  p.cluster = cs;
  p.slice = static_cast<int>(p.threads * per_thread);
  p.smem = 0;
  return true;
}

// The plan of one row step: on sm_90 (the cluster kernels' sm_90 code runs on
// this device: not on older GPUs, nor from a build without sm_90, where their
// stubs trap), for 16-byte aligned rows of at least 2048 elements, the smem
// kernel, else the register kernel; else, or where neither fits, two-pass.
// plan_override ce=two_pass|cluster|smem forces a kernel where it can run.
template <typename T>
CePlan plan_rows(const CeRowsArgs& a) {
  constexpr int VE16 = 16 / sizeof(T);
  const int64_t V = a.cols;
  CePlan p{};
  p.plain = a.softcap == 0.f && a.label_smoothing == 0.f && a.weight == nullptr;
  p.argmax = a.argmax != nullptr;
  const bool aligned =
      is_aligned(a.logits, 16) && (a.logits_row_stride * sizeof(T)) % 16 == 0 &&
      (!a.dlogits || (is_aligned(a.dlogits, 16) && (a.dlogits_row_stride * sizeof(T)) % 16 == 0)) &&
      V % VE16 == 0;
  const int forced = plan_override::forced(plan_override::Key::kCe);
  const bool sm90_code =
      binary_version(reinterpret_cast<const void*>(ce_cluster_kernel<T, true, false>)) >= 90;
  if (forced != static_cast<int>(CeKernel::kTwoPass) && aligned && sm90_code && V >= 2048) {
    if (forced != static_cast<int>(CeKernel::kCluster) && plan_smem<T>(a, p)) return p;
    if (plan_cluster<T>(a, p)) return p;
  }
  p.kernel = CeKernel::kTwoPass;
  p.vec = aligned;
  p.threads = V >= 8192 ? 1024 : (V >= 1024 ? 256 : 128);
  p.cluster = 1;
  return p;
}

template <typename T>
cudaError_t launch_rows(const CePlan& p, const CeRowsArgs& a, cudaStream_t stream) {
  constexpr int VE16 = 16 / sizeof(T);
  if (p.kernel == CeKernel::kTwoPass) {
    if (a.rows > INT32_MAX) return cudaErrorInvalidValue;
    if (p.vec)
      ce_two_pass_kernel<T, VE16><<<static_cast<unsigned>(a.rows), p.threads, 0, stream>>>(a);
    else
      ce_two_pass_kernel<T, 1><<<static_cast<unsigned>(a.rows), p.threads, 0, stream>>>(a);
    return cudaGetLastError();
  }
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg =
      cluster_launch_config(p.threads, static_cast<int>(p.cluster), p.smem, stream, attr);
  cfg.gridDim = dim3(static_cast<unsigned>(a.rows * p.cluster));
  if (p.kernel == CeKernel::kSmem)
    return cudaLaunchKernelEx(&cfg, smem_kernel<T>(p.plain, p.argmax), a, p.slice);
  return cudaLaunchKernelEx(&cfg, cluster_kernel<T>(p.plain, p.argmax), a, p.slice);
}

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

}  // namespace

cudaError_t ce_rows(const CeRowsArgs& a, int /*sm_count*/, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  return dispatch_dtype(a.dtype, [&](auto t) {
    using T = decltype(t);
    return launch_rows<T>(plan_rows<T>(a), a, stream);
  });
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
