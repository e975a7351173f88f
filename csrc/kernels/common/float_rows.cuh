// Device helpers of the row kernels that compute in float32 on VEC elements a thread (DyT, PolyNorm):
// a vector of T read into floats, floats written back as T (16-byte vectors as one st.global.v4),
// and the launchers' dispatch over (x's dtype, the parameters' dtype: x's or float32). In an unnamed
// namespace, as norm_common.cuh: each .cu gets its own copy.
#pragma once

#include "kernels/common/common.cuh"

namespace liger_cpp::kernels {
namespace {

template <typename T, int VEC>
__device__ __forceinline__ void load_floats(const T* p, float (&f)[VEC]) {
  const Vec<T, VEC> v = load_vec<T, VEC>(p);
#pragma unroll
  for (int j = 0; j < VEC; ++j) f[j] = to_float<T>(v.v[j]);
}

template <typename T, int VEC>
__device__ __forceinline__ void store_floats(T* p, const float (&f)[VEC]) {
  if constexpr (VEC * sizeof(T) == 16) {
    store_16B_words(p, pack_vec<T, VEC>(f));
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) p[j] = from_float<T>(f[j]);
  }
}

// Calls f(T{}, WT{}) for x's dtype dt and the parameters' wt (dt or float32; anything else is an
// invalid value: the host wrappers cast such parameters to float32).
template <typename F>
cudaError_t dispatch_x_and_param_dtypes(DType dt, DType wt, F&& f) {
  return dispatch_dtype(dt, [&](auto tv) -> cudaError_t {
    if (wt == DType::kFloat32) return f(tv, float{});
    if (wt != dt) return cudaErrorInvalidValue;
    return f(tv, tv);
  });
}

}  // namespace
}  // namespace liger_cpp::kernels
