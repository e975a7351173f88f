// Device helpers shared by several LayerNorm kernel families (layer_norm_*.cu),
// and the launchers' dtype dispatch. In an unnamed namespace, as
// norm_common.cuh: each .cu gets its own copy.
#pragma once

#include <type_traits>

#include "kernels/norm/norm_common.cuh"

namespace liger_cpp::kernels {
namespace {

// Calls f on a value of each C++ type of d.
template <typename F>
void with_ln_ctype(DType d, F&& f) {
  switch (d) {
    case DType::kFloat32:
      f(float{});
      break;
    case DType::kFloat16:
      f(__half{});
      break;
    case DType::kBFloat16:
      f(__nv_bfloat16{});
      break;
  }
}

// f(T{}, WT{}) for the C++ types of (xd, wd) where the kernels take them (WT is
// T or float, either when T is float), else `invalid`.
template <typename R, typename F>
R dispatch_ln_types(DType xd, DType wd, R invalid, F&& f) {
  R out = invalid;
  with_ln_ctype(xd, [&](auto xt) {
    with_ln_ctype(wd, [&](auto wt) {
      using T = decltype(xt);
      using WT = decltype(wt);
      if constexpr (std::is_same_v<WT, T> || std::is_same_v<WT, float> || std::is_same_v<T, float>)
        out = f(T{}, WT{});
    });
  });
  return out;
}

// VEC parameters (w or b) from column c as floats; dflt for all without one.
template <typename WT, int VEC>
__device__ __forceinline__ void load_param(const WT* p, int64_t c, float dflt, float (&out)[VEC]) {
  if (p == nullptr) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[j] = dflt;
    return;
  }
  unpack_floats<WT, VEC>(load_vec<WT, VEC>(p + c), out);
}

// 8 or 16 bytes as 32-bit words; volatile, so issued where written (see load_16B_volatile).
template <int NW>
__device__ __forceinline__ void load_words(uint32_t (&d)[NW], const void* src) {
  static_assert(NW == 2 || NW == 4, "8 or 16 bytes");
  if constexpr (NW == 4) {
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "l"(src));
  } else {
    asm volatile("ld.global.v2.u32 {%0, %1}, [%2];" : "=r"(d[0]), "=r"(d[1]) : "l"(src));
  }
}

// Values converted from the words earlier cannot be reused past this point (see opaque_16B).
template <int NW>
__device__ __forceinline__ void opaque_words(uint32_t (&d)[NW]) {
#pragma unroll
  for (int q = 0; q < NW; ++q) asm volatile("" : "+r"(d[q]));
}

}  // namespace
}  // namespace liger_cpp::kernels
