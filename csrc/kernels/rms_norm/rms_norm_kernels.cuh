// Device helpers shared by several RMSNorm kernel families (rms_norm_*.cu),
// and the launchers' dtype dispatch. In an unnamed namespace, as
// norm_common.cuh: each .cu gets its own copy.
#pragma once

#include <type_traits>

#include "kernels/norm/norm_common.cuh"

namespace liger_cpp::kernels {
namespace {

// The (x, w, y) dtypes the ops pass (rms_norm_impl.h: valid_dtypes), the only ones built.
template <typename T, typename WT, typename OT>
constexpr bool valid_types() {
  constexpr bool w_ok = std::is_same_v<WT, T> || std::is_same_v<WT, float> || std::is_same_v<T, float>;
  constexpr bool o_ok = std::is_same_v<OT, T> || (std::is_same_v<OT, float> && std::is_same_v<WT, float>);
  return w_ok && o_ok;
}

// Calls f on a value of each C++ type of d.
template <typename F>
void with_ctype(DType d, F&& f) {
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

// f(T{}, WT{}, OT{}) for the C++ types of (xd, wd, yd) where the kernels take
// them (valid_types), else `invalid`.
template <typename R, typename F>
R dispatch_types(DType xd, DType wd, DType yd, R invalid, F&& f) {
  R out = invalid;
  with_ctype(xd, [&](auto xt) {
    with_ctype(wd, [&](auto wt) {
      with_ctype(yd, [&](auto yt) {
        using T = decltype(xt);
        using WT = decltype(wt);
        using OT = decltype(yt);
        if constexpr (valid_types<T, WT, OT>()) out = f(T{}, WT{}, OT{});
      });
    });
  });
  return out;
}

// The backwards' weights in shared memory as floats, converted once: this
// thread's VEC weights (+ offset) as VEC / 4 float4s at slot[0], slot[stride],
// ..., read back by the same thread with load_weight_floats (no barrier). w
// points at the thread's first column.
template <typename WT, int VEC>
__device__ __forceinline__ void store_weight_floats(float4* slot, int stride, const WT* w, float offset) {
  static_assert(VEC % 4 == 0, "whole float4s of weights");
  const Vec<WT, VEC> t = load_vec<WT, VEC>(w);
#pragma unroll
  for (int q = 0; q < VEC / 4; ++q)
    slot[q * stride] =
        make_float4(to_float<WT>(t.v[4 * q]) + offset, to_float<WT>(t.v[4 * q + 1]) + offset,
                    to_float<WT>(t.v[4 * q + 2]) + offset, to_float<WT>(t.v[4 * q + 3]) + offset);
}
// No weight: ones (without the offset, as load_weight) in the same slots.
template <int VEC>
__device__ __forceinline__ void store_weight_ones(float4* slot, int stride) {
#pragma unroll
  for (int q = 0; q < VEC / 4; ++q) slot[q * stride] = make_float4(1.f, 1.f, 1.f, 1.f);
}
// stored: false reads ones without touching slot (the caller stored nothing).
template <int VEC>
__device__ __forceinline__ void load_weight_floats(const float4* slot, int stride, bool stored,
                                                   float (&wf)[VEC]) {
#pragma unroll
  for (int q = 0; q < VEC / 4; ++q) {
    const float4 t = stored ? slot[q * stride] : make_float4(1.f, 1.f, 1.f, 1.f);
    wf[4 * q] = t.x;
    wf[4 * q + 1] = t.y;
    wf[4 * q + 2] = t.z;
    wf[4 * q + 3] = t.w;
  }
}

// d[j] += ds_out[j] (the gradient reaching s from the residual path), when given.
template <typename T, int VEC>
__device__ __forceinline__ void add_ds_out(float (&d)[VEC], const T* ds_out) {
  if (ds_out == nullptr) return;
  const Vec<T, VEC> v = load_vec<T, VEC>(ds_out);
#pragma unroll
  for (int j = 0; j < VEC; ++j) d[j] += to_float<T>(v.v[j]);
}

// opaque_16B for any whole number of 32-bit words.
template <typename V>
__device__ __forceinline__ void opaque_words(V& v) {
  static_assert(sizeof(V) % 4 == 0, "whole words only");
  uint32_t* w = reinterpret_cast<uint32_t*>(&v);
#pragma unroll
  for (int k = 0; k < static_cast<int>(sizeof(V) / 4); ++k) asm volatile("" : "+r"(w[k]));
}

}  // namespace
}  // namespace liger_cpp::kernels
