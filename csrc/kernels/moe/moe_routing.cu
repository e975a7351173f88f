// MoE routing metadata on the device (moe.h): a stable counting sort of the S slots by expert in
// four small kernels, no host synchronisation, deterministic (integer counts only; a slot's rank
// among its chunk's slots of the same expert is counted, not raced for).
//   1. count:   per chunk of kMoeRoutingChunk slots, the slots of each expert (E + 1 buckets, the
//               last one for dropped slots, expert outside [0, E)).
//   2. chunks:  per expert, the exclusive prefix of its counts over the chunks, and its total.
//   3. experts: the exclusive prefix of the totals over the experts (each expert's first row) and
//               the grouped GEMMs' inclusive offsets.
//   4. scatter: row = expert start + chunk prefix + rank in the chunk; sorted_slot, slot_row,
//               sorted_expert.
#include <cuda_runtime.h>

#include "kernels/common/common.cuh"
#include "kernels/moe/moe.h"

namespace liger_cpp::kernels {
namespace {

constexpr int kScanThreads = 1024;

template <typename IdxT>
__device__ __forceinline__ int expert_of(const IdxT* idx, int64_t s, int num_experts) {
  const int64_t e = static_cast<int64_t>(idx[s]);
  return (e < 0 || e >= num_experts) ? num_experts : static_cast<int>(e);
}

template <typename IdxT>
__global__ void routing_count_kernel(const IdxT* __restrict__ idx, int64_t num_slots, int num_experts,
                                     int32_t* __restrict__ chunk_counts) {
  extern __shared__ int cnt[];
  const int nb = num_experts + 1;
  for (int e = threadIdx.x; e < nb; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  const int64_t s = static_cast<int64_t>(blockIdx.x) * kMoeRoutingChunk + threadIdx.x;
  if (s < num_slots) atomicAdd(&cnt[expert_of(idx, s, num_experts)], 1);
  __syncthreads();
  int32_t* out = chunk_counts + static_cast<int64_t>(blockIdx.x) * nb;
  for (int e = threadIdx.x; e < nb; e += blockDim.x) out[e] = cnt[e];
}

// Exclusive prefix of v over the block (blockDim.x = kScanThreads); *total = the block's sum.
__device__ __forceinline__ int block_exclusive_scan(int v, int* warp_sums, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < nwarps ? warp_sums[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    warp_sums[lane] = w;
  }
  __syncthreads();
  const int before = (warp > 0 ? warp_sums[warp - 1] : 0) + x - v;
  *total = warp_sums[nwarps - 1];
  __syncthreads();  // warp_sums is reused by the next call
  return before;
}

// Block e: the exclusive prefix of expert e's chunk counts (in place) and its total.
__global__ void routing_chunks_kernel(int32_t* __restrict__ chunk_counts, int64_t num_chunks, int num_experts,
                                      int32_t* __restrict__ totals) {
  __shared__ int warp_sums[32];
  const int nb = num_experts + 1;
  const int e = blockIdx.x;
  int carry = 0;
  for (int64_t base = 0; base < num_chunks; base += blockDim.x) {
    const int64_t c = base + threadIdx.x;
    const int v = c < num_chunks ? chunk_counts[c * nb + e] : 0;
    int tile_total;
    const int before = block_exclusive_scan(v, warp_sums, &tile_total);
    if (c < num_chunks) chunk_counts[c * nb + e] = carry + before;
    carry += tile_total;
  }
  if (threadIdx.x == 0) totals[e] = carry;
}

// One block: starts[e] = the rows of the experts before e; offsets[e] = starts[e] + totals[e].
__global__ void routing_experts_kernel(const int32_t* __restrict__ totals, int num_experts,
                                       int32_t* __restrict__ starts, int32_t* __restrict__ offsets) {
  __shared__ int warp_sums[32];
  const int nb = num_experts + 1;
  int carry = 0;
  for (int base = 0; base < nb; base += blockDim.x) {
    const int e = base + threadIdx.x;
    const int v = e < nb ? totals[e] : 0;
    int tile_total;
    const int before = block_exclusive_scan(v, warp_sums, &tile_total);
    if (e < nb) {
      starts[e] = carry + before;
      if (e < num_experts) offsets[e] = carry + before + v;
    }
    carry += tile_total;
  }
}

template <typename IdxT>
__global__ void routing_scatter_kernel(const IdxT* __restrict__ idx, int64_t num_slots, int num_experts,
                                       const int32_t* __restrict__ chunk_prefix,
                                       const int32_t* __restrict__ starts, int32_t* __restrict__ sorted_slot,
                                       int32_t* __restrict__ slot_row, int32_t* __restrict__ sorted_expert) {
  __shared__ int ex[kMoeRoutingChunk];
  const int64_t s = static_cast<int64_t>(blockIdx.x) * kMoeRoutingChunk + threadIdx.x;
  const int e = s < num_slots ? expert_of(idx, s, num_experts) : -1;
  ex[threadIdx.x] = e;
  __syncthreads();
  if (e < 0) return;
  int rank = 0;
  for (int j = 0; j < static_cast<int>(threadIdx.x); ++j) rank += ex[j] == e;
  const int nb = num_experts + 1;
  const int row = starts[e] + chunk_prefix[static_cast<int64_t>(blockIdx.x) * nb + e] + rank;
  sorted_slot[row] = static_cast<int32_t>(s);
  slot_row[s] = row;
  sorted_expert[row] = e;
}

template <typename IdxT>
cudaError_t routing_launch(const MoeRoutingArgs& a, cudaStream_t stream) {
  const IdxT* idx = static_cast<const IdxT*>(a.top_k_index);
  const int64_t num_chunks = ceil_div(a.num_slots, kMoeRoutingChunk);
  const int nb = a.num_experts + 1;
  int32_t* chunk_counts = a.workspace;
  int32_t* totals = chunk_counts + num_chunks * nb;
  int32_t* starts = totals + nb;
  const size_t smem = static_cast<size_t>(nb) * sizeof(int);
  if (smem > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(
        routing_count_kernel<IdxT>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return err;
  }
  routing_count_kernel<IdxT>
      <<<num_chunks, kMoeRoutingChunk, smem, stream>>>(idx, a.num_slots, a.num_experts, chunk_counts);
  routing_chunks_kernel<<<nb, kScanThreads, 0, stream>>>(chunk_counts, num_chunks, a.num_experts, totals);
  routing_experts_kernel<<<1, kScanThreads, 0, stream>>>(totals, a.num_experts, starts, a.offsets);
  routing_scatter_kernel<IdxT><<<num_chunks, kMoeRoutingChunk, 0, stream>>>(
      idx, a.num_slots, a.num_experts, chunk_counts, starts, a.sorted_slot, a.slot_row, a.sorted_expert);
  return cudaGetLastError();
}

}  // namespace

int64_t moe_routing_workspace(int64_t num_slots, int num_experts) {
  return (ceil_div(num_slots, kMoeRoutingChunk) + 2) * (static_cast<int64_t>(num_experts) + 1);
}

cudaError_t moe_routing(const MoeRoutingArgs& a, cudaStream_t stream) {
  if (a.num_slots == 0) return cudaSuccess;
  return a.index_int64 ? routing_launch<int64_t>(a, stream) : routing_launch<int32_t>(a, stream);
}

}  // namespace liger_cpp::kernels
