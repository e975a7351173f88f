// The GLU activations and their derivatives (glu.h states the math), fp32, for the kernels of
// glu_kernels.cuh: Act<A>::f(x) = act(x); Act<A>::fd(x, y, d) sets y = act(x), d = act'(x).
#pragma once

#include <cmath>

#include "kernels/glu/glu.h"

namespace liger_cpp::kernels {
namespace {

template <GluAct ACT>
struct Act;

// SiLU's sigmoid with its reciprocal taken without an IEEE division: x / (1 + e)
// compiles to a checked slow path (FCHK, a branch and a convergence barrier per
// element: 60 BSSY in the bf16 forward's SASS against 4 for GELU-tanh's), which
// cost the tiled kernels a fifth of their forward bandwidth (docs/kernels/glu.md).
// Here 1 / d, d = 1 + e >= 1, is rcp.approx (subnormal results kept) refined by
// one Newton step, within about 1 ulp of the rounded reciprocal; d = inf gives 0
// (the limit) instead of the step's NaN. No branches.
__device__ __forceinline__ float sigmoid_of_exp_neg(float e) {
  const float d = 1.f + e;
  float r;
  asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(d));
  r = fmaf(r, fmaf(-d, r, 1.f), r);
  return d == INFINITY ? 0.f : r;
}

template <>
struct Act<GluAct::kSilu> {
  static __device__ __forceinline__ float f(float x) { return x * sigmoid_of_exp_neg(expf(-x)); }
  static __device__ __forceinline__ void fd(float x, float& y, float& d) {
    const float s = sigmoid_of_exp_neg(expf(-x));
    y = x * s;
    d = s * (1.f + x * (1.f - s));
  }
};

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoef = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

template <>
struct Act<GluAct::kGeluTanh> {
  static __device__ __forceinline__ float f(float x) {
    const float t = tanhf(kSqrt2OverPi * (x + kGeluCoef * x * x * x));
    return 0.5f * x * (1.f + t);
  }
  static __device__ __forceinline__ void fd(float x, float& y, float& d) {
    const float x2 = x * x;
    const float t = tanhf(kSqrt2OverPi * (x + kGeluCoef * x2 * x));
    y = 0.5f * x * (1.f + t);
    d = 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * kGeluCoef * x2);
  }
};

template <>
struct Act<GluAct::kGeluErf> {
  static __device__ __forceinline__ float f(float x) { return 0.5f * x * (1.f + erff(x * kInvSqrt2)); }
  static __device__ __forceinline__ void fd(float x, float& y, float& d) {
    const float cdf = 0.5f * (1.f + erff(x * kInvSqrt2));
    y = x * cdf;
    d = cdf + x * kInvSqrt2Pi * expf(-0.5f * x * x);
  }
};

}  // namespace
}  // namespace liger_cpp::kernels
