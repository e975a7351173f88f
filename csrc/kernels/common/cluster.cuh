// sm_90 thread-block-cluster, mbarrier and TMA bulk-copy helpers shared by
// the cluster and shared-memory kernels (ce_cluster.cuh's ce_cluster_kernel,
// ce_smem.cuh's ce_smem_kernel, rms_norm_bwd_cluster.cu's rms_bwd_cluster,
// layer_norm_bwd_tma.cu's ln_bwd_tma). PTX only valid on sm_90+: call them only
// from code compiled for it (the kernels guard their bodies with __CUDA_ARCH__).
// In an unnamed namespace, as norm_common.cuh: each .cu gets its own copy.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace liger_cpp::kernels {
namespace {

// The 32-bit shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// This block's rank in its cluster, and the cluster's number of blocks.
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t cluster_nctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}

// The shared::cluster address of the same shared-memory offset as *p in
// block `rank` of this cluster (DSMEM).
__device__ __forceinline__ uint32_t peer_addr(const void* p, uint32_t rank) {
  uint32_t a;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(smem_addr(p)), "r"(rank));
  return a;
}

// The float at the same shared-memory offset as *p in block `rank` of this
// cluster; the caller orders it after the peer's writes (a cluster barrier
// with release / acquire).
__device__ __forceinline__ float ld_peer_f32(const float* p, uint32_t rank) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(peer_addr(p, rank)) : "memory");
  return v;
}

// st.async of one, two or four 32-bit words to the shared::cluster address
// `dst` (4-, 8- or 16-byte aligned), completing their bytes on the mbarrier at
// shared::cluster address `bar` of the same block (both from peer_addr): the
// receiver waits on its own mbarrier, no cluster barrier needed.
__device__ __forceinline__ void st_async_b32(uint32_t dst, uint32_t bar, uint32_t a) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(dst), "r"(a),
               "r"(bar)
               : "memory");
}
__device__ __forceinline__ void st_async_v2(uint32_t dst, uint32_t bar, uint32_t a, uint32_t b) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];" ::"r"(dst), "r"(a),
      "r"(b), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void st_async_v4(uint32_t dst, uint32_t bar, uint32_t a, uint32_t b, uint32_t c,
                                            uint32_t d) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(dst),
      "r"(a), "r"(b), "r"(c), "r"(d), "r"(bar)
      : "memory");
}

// After mbar_init: the initialisations visible to the cluster (release).
__device__ __forceinline__ void fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// A proxy fence between this block's generic-proxy shared-memory accesses
// and async-proxy ones (TMA bulk copies, the mbarrier inits they complete
// on), in either order, as the PTX proxy model asks for.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Cluster-wide barrier, split into a relaxed arrive and a wait. Relaxed: no
// memory ordering (barrier.cluster.arrive.release compiled to MEMBAR.ALL.GPU,
// which waits for every outstanding store and load of the thread); the
// callers order what they need through mbarriers or data dependencies.
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;" ::: "memory"); }

// Cluster-wide barrier with memory ordering (arrive.release, wait.acquire):
// this block's shared-memory writes before it are visible to the cluster's
// DSMEM reads after it. For a one-off exchange (its MEMBAR, see above).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::
                   : "memory");
}

// An mbarrier expecting one arrival per phase.
__device__ __forceinline__ void mbar_init(unsigned long long* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
}

// Arrives on the mbarrier's current phase, expecting `bytes` of transactions.
__device__ __forceinline__ void mbar_expect_tx(unsigned long long* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

// Spins until the mbarrier's phase with this parity has completed.
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// One 1-D bulk copy of `bytes` (a multiple of 16, both addresses 16-byte
// aligned) from global memory into this block's shared memory, completing
// `bytes` of the mbarrier's transaction count.
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes,
                                              unsigned long long* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// Host: the launch configuration of clusters of `cl` blocks along x, with
// gridDim one cluster (callers scale it). `attr` is referenced by the result,
// not copied: it must outlive the launch call.
inline cudaLaunchConfig_t cluster_launch_config(int threads, int cl, size_t smem, cudaStream_t stream,
                                                cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(cl));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(cl);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

}  // namespace
}  // namespace liger_cpp::kernels
