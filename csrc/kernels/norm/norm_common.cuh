// Device helpers shared by the row-wise norm kernels (RMSNorm, FusedAddRMSNorm, LayerNorm): weight
// loads, volatile loads, named barriers and cp.async (the packed stores, pack_vec and
// store_16B_words, are common.cuh's). Their launch planning is in norm_plan.h, the fixed-order
// reduction of per-block fp32 partial sums in reduce_partials.cuh. Everything is in an unnamed
// namespace: each .cu gets its own copy (kernels included), so no template kernel is shared across
// translation units.
#pragma once

#include <cstring>
#include <type_traits>

#include "kernels/common/common.cuh"

namespace liger_cpp::kernels {
namespace {

constexpr int kGroupScratch = 32 * 32;  // floats: up to 32 groups x 32 warps

// RMSNorm's xn = x * rstd as the forward multiplies it by the weight (llama,
// HF's LlamaRMSNorm, rounds it to x's dtype T first).
template <typename T>
__device__ __forceinline__ float normed(float xf, float r, bool llama) {
  const float v = xf * r;
  return llama ? round_through<T>(v) : v;
}

// (w + offset) for VEC consecutive columns starting at column c (a multiple
// of VEC), loaded as one aligned access; all ones without a weight.
template <typename WT, int VEC>
__device__ __forceinline__ void load_weight(const WT* w, int64_t c, float offset, float (&out)[VEC]) {
  if (w == nullptr) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[j] = 1.f;
    return;
  }
  const Vec<WT, VEC> wv = load_vec<WT, VEC>(w + c);
#pragma unroll
  for (int j = 0; j < VEC; ++j) out[j] = to_float<WT>(wv.v[j]) + offset;
}

// load_16B_volatile for any whole number of 16-byte vectors.
template <typename V>
__device__ __forceinline__ void load_words_volatile(V& dst, const void* src) {
  static_assert(sizeof(V) % 16 == 0, "whole 16-byte vectors only");
  uint32_t* d = reinterpret_cast<uint32_t*>(&dst);
  const char* s = static_cast<const char*>(src);
#pragma unroll
  for (int c = 0; c < static_cast<int>(sizeof(V) / 16); ++c)
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(d[4 * c]), "=r"(d[4 * c + 1]), "=r"(d[4 * c + 2]), "=r"(d[4 * c + 3])
                 : "l"(s + 16 * c));
}

// Named barrier over the `nthreads` threads (a multiple of 32) that use the
// same `id` (1..15; 0 is __syncthreads's).
__device__ __forceinline__ void named_barrier(int id, int nthreads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}
constexpr int kMaxNamedGroups = 15;  // named barriers 1..15

// 16 bytes global -> shared without passing through registers (sm_80+), so
// the bytes in flight are not limited by the register file.
__device__ __forceinline__ void copy_16B_async(void* dst_smem, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst_smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
#else
  *static_cast<uint4*>(dst_smem) = *static_cast<const uint4*>(src);
#endif
}
// 4 bytes global -> shared, as copy_16B_async (through L1: .cg takes 16 bytes only).
__device__ __forceinline__ void copy_4B_async(void* dst_smem, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst_smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
#else
  *static_cast<uint32_t*>(dst_smem) = *static_cast<const uint32_t*>(src);
#endif
}
__device__ __forceinline__ void async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

#define LIGER_DISPATCH_VEC(vec, VEC_FULL, ...) \
  if ((vec) == 1) {                            \
    constexpr int VEC = 1;                     \
    __VA_ARGS__                                \
  } else {                                     \
    constexpr int VEC = VEC_FULL;              \
    __VA_ARGS__                                \
  }

}  // namespace
}  // namespace liger_cpp::kernels
