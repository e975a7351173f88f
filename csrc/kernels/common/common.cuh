// Shared device helpers for the ATen-free kernels: element conversion, aligned
// vectors, warp and group reductions, and dtype dispatch onto templates.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/dtype.h"

namespace liger_cpp::kernels {

template <typename T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float to_float<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Rounds a float through T, as a `.to(T)` followed by `.float()` would.
template <typename T>
__device__ __forceinline__ float round_through(float v) {
  return to_float<T>(from_float<T>(v));
}

// N elements of T loaded or stored as one aligned access (16 bytes for the
// common VEC = 16 / sizeof(T); wider types split into several 16-byte accesses).
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

template <typename T, int N>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, N>*>(p);
}

template <typename T, int N>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& v) {
  *reinterpret_cast<Vec<T, N>*>(p) = v;
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
// plain struct store (store_vec) is split by nvcc: in rms_fwd_cached, PTX for
// the bf16 ADD instance stores the last two vectors of each row piece as
// 8 x st.global.u16 (y and s) and the plain instance's y as 4 x 32-bit
// stores, i.e. up to 8 store instructions (and L2 write requests) per 16 bytes;
// the distillation row kernel's gradient went out as 4 x 32-bit stores a group
// (18 % of KL's row-kernel time on an H100, docs/kernels/rl_losses.md).
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

// 16 bytes from global memory into registers, kept in program order with the
// other volatile loads: issued where written rather than sunk next to their
// first use (which nvcc does under register caps, leaving one or two loads in
// flight per thread).
template <typename V>
__device__ __forceinline__ void load_16B_volatile(V& dst, const void* src) {
  static_assert(sizeof(V) == 16, "16-byte vectors only");
  uint32_t* d = reinterpret_cast<uint32_t*>(&dst);
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "l"(src));
}

// An L2 eviction policy (sm_80+) for loads with a cache hint: LAST =
// evict_last, for data read again soon (kept in L2 over streaming traffic);
// else evict_first, for the last read of data.
template <bool LAST>
__device__ __forceinline__ uint64_t l2_evict_policy() {
  uint64_t p;
  if constexpr (LAST)
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  else
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

// load_16B_volatile with an L2 eviction policy (l2_evict_policy). L1: the L1
// eviction priority as well (kL1Default: none; kL1Last / kL1First: the
// L1::evict_last / L1::evict_first qualifiers Triton adds with its L2 policy).
enum L1Evict : int { kL1Default = 0, kL1Last = 1, kL1First = 2 };
template <int L1 = kL1Default, typename V>
__device__ __forceinline__ void load_16B_hint(V& dst, const void* src, uint64_t policy) {
  static_assert(sizeof(V) == 16, "16-byte vectors only");
  uint32_t* d = reinterpret_cast<uint32_t*>(&dst);
  if constexpr (L1 == kL1Last)
    asm volatile("ld.global.L1::evict_last.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "l"(src), "l"(policy));
  else if constexpr (L1 == kL1First)
    asm volatile("ld.global.L1::evict_first.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "l"(src), "l"(policy));
  else
    asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "l"(src), "l"(policy));
}

// An empty asm that "modifies" a 16-byte register vector: values converted from
// it earlier cannot be kept alive past this point, so the compiler keeps the
// packed words (e.g. 4 registers for 8 bf16) instead of 8 floats, which spilled.
template <typename V>
__device__ __forceinline__ void opaque_16B(V& v) {
  static_assert(sizeof(V) == 16, "16-byte vectors only");
  uint32_t* w = reinterpret_cast<uint32_t*>(&v);
  asm volatile("" : "+r"(w[0]), "+r"(w[1]), "+r"(w[2]), "+r"(w[3]));
}

// Element j of values of T packed in 32-bit words, as a float (bitwise
// to_float's). Register vectors kept as words are not split by nvcc into one
// register per 16-bit element (Vec<bf16, 8> buffers spilled); a bf16 word's
// two halves widen with one integer op each (lo << 16, hi & 0xffff0000), where
// the element-wise __bfloat162float costs a PRMT and an IMAD for every odd
// element.
template <typename T>
__device__ __forceinline__ float word_elem(const uint32_t* w, int j) {
  if constexpr (std::is_same_v<T, float>) {
    return __uint_as_float(w[j]);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __uint_as_float((j & 1) ? (w[j >> 1] & 0xffff0000u) : (w[j >> 1] << 16));
  } else {
    return __half2float(
        __ushort_as_half(static_cast<unsigned short>((j & 1) ? (w[j >> 1] >> 16) : w[j >> 1])));
  }
}

// The VEC elements of v as floats; bf16 through word_elem's word ops.
template <typename T, int VEC>
__device__ __forceinline__ void unpack_floats(const Vec<T, VEC>& v, float (&f)[VEC]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16> && VEC % 2 == 0) {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(&v);
#pragma unroll
    for (int j = 0; j < VEC; ++j) f[j] = word_elem<T>(w, j);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) f[j] = to_float<T>(v.v[j]);
  }
}

// Programmatic dependent launch (sm_90; no-ops elsewhere and in a kernel
// launched without the attribute, see launch_pdl in launch_cache.h).
// pdl_wait: blocks until the grids this one depends on have completed and
// their writes are visible; a kernel launched with the attribute calls it
// before its first global read. pdl_trigger: lets the next PDL-launched kernel
// in the stream start its blocks (they wait in pdl_wait) once every block of
// this grid has called it or exited.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the blockDim.x threads of one threadIdx.y group (blockDim.x is a
// multiple of 32). Every thread of the block must call it (it synchronises).
// `scratch` holds at least blockDim.y * 32 floats. The order of the additions
// is fixed, so the result is deterministic.
// FIRST_USE: no thread of the block has read `scratch` before this call (its
// only use in a one-row-per-group kernel, e.g. the forwards): the barrier that
// keeps a previous call's readers ahead of this call's writers is skipped,
// one __syncthreads a row less.
template <bool FIRST_USE = false>
__device__ __forceinline__ float group_sum(float v, float* scratch) {
  v = warp_sum(v);
  if (blockDim.x == 32) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  float* mine = scratch + threadIdx.y * 32;
  if constexpr (!FIRST_USE) __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) mine[warp] = v;
  __syncthreads();
  float s = lane < nwarps ? mine[lane] : 0.f;
  return warp_sum(s);
}

// dtype -> C++ type, for dispatch in the launchers.
template <DType D>
struct CType;
template <>
struct CType<DType::kFloat32> {
  using type = float;
};
template <>
struct CType<DType::kFloat16> {
  using type = __half;
};
template <>
struct CType<DType::kBFloat16> {
  using type = __nv_bfloat16;
};

// Calls f(T{}) with T the C++ type of `d`.
template <typename F>
inline cudaError_t dispatch_dtype(DType d, F&& f) {
  switch (d) {
    case DType::kFloat32:
      return f(float{});
    case DType::kFloat16:
      return f(__half{});
    case DType::kBFloat16:
      return f(__nv_bfloat16{});
  }
  return cudaErrorInvalidValue;
}

inline bool is_aligned(const void* p, int bytes) {
  return (reinterpret_cast<std::uintptr_t>(p) % bytes) == 0;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace liger_cpp::kernels
