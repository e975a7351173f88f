// Device helpers shared by the row-wise norm kernels (RMSNorm, FusedAddRMSNorm,
// LayerNorm): weight loads, packed stores, volatile loads, named barriers and
// cp.async. Their launch planning is in norm_plan.h, the fixed-order reduction
// of per-block fp32 partial sums in reduce_partials.cuh.
// Everything is in an unnamed namespace: each .cu gets its own copy (kernels
// included), so no template kernel is shared across translation units.
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

// Two floats rounded to a 16-bit T and packed into one 32-bit word (low half
// first, as in memory): one cvt.rn.{bf16,f16}x2.f32 on sm_80+, the same
// rounding as two from_float calls.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  static_assert(sizeof(T) == 2, "16-bit types only");
  uint32_t u;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    std::memcpy(&u, &h, 4);
  } else {
    const __half2 h = __floats2half2_rn(lo, hi);
    std::memcpy(&u, &h, 4);
  }
  return u;
}

// VEC floats rounded to T, built as 32-bit words (so nothing downstream sees
// separate 16-bit elements).
template <typename T, int VEC>
__device__ __forceinline__ Vec<T, VEC> pack_vec(const float (&f)[VEC]) {
  static_assert(sizeof(Vec<T, VEC>) % 4 == 0, "whole words only");
  Vec<T, VEC> out;
  uint32_t* o = reinterpret_cast<uint32_t*>(&out);
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) o[j] = __float_as_uint(f[j]);
  } else {
#pragma unroll
    for (int k = 0; k < VEC / 2; ++k) o[k] = pack2<T>(f[2 * k], f[2 * k + 1]);
  }
  return out;
}

// A whole number of 16-byte vectors stored with st.global.v4.b32 each. The
// plain struct store (store_vec) is split by nvcc in rms_fwd_cached: PTX for
// the bf16 ADD instance stores the last two vectors of each row piece as
// 8 x st.global.u16 (y and s) and the plain instance's y as 4 x 32-bit
// stores, i.e. up to 8 store instructions (and L2 write requests) per 16 bytes.
template <typename V>
__device__ __forceinline__ void store_16B_words(void* dst, const V& v) {
  static_assert(sizeof(V) % 16 == 0, "whole 16-byte vectors only");
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&v);
  char* d = static_cast<char*>(dst);
#pragma unroll
  for (int c = 0; c < static_cast<int>(sizeof(V) / 16); ++c)
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(d + 16 * c), "r"(w[4 * c]),
                 "r"(w[4 * c + 1]), "r"(w[4 * c + 2]), "r"(w[4 * c + 3]));
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
