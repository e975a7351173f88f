// The GLU ops (liger::swiglu_* / geglu_*) as other ops' C++ calls them, below autograd: the GLU's
// autograd and the GLU MLP composite. approximate: nullptr for SwiGLU, GeGLU's approximation
// ("tanh" or "none") otherwise.
#pragma once

#include <ATen/ATen.h>

#include <tuple>

#include "aten/op_handle.h"

namespace liger_cpp {
namespace glu_ops {

using Pair = std::tuple<at::Tensor, at::Tensor>;

inline at::Tensor fwd(const at::Tensor& a, const at::Tensor& b, const char* approximate, bool in_place) {
  static const auto swiglu =
      find_op<at::Tensor(const at::Tensor&, const at::Tensor&, bool)>("liger::swiglu_fwd");
  static const auto geglu =
      find_op<at::Tensor(const at::Tensor&, const at::Tensor&, c10::string_view, bool)>("liger::geglu_fwd");
  const at::AutoDispatchBelowADInplaceOrView below;
  return approximate ? geglu.call(a, b, approximate, in_place) : swiglu.call(a, b, in_place);
}

inline Pair bwd(const at::Tensor& dc, const at::Tensor& a, const at::Tensor& b, const char* approximate) {
  static const auto swiglu =
      find_op<Pair(const at::Tensor&, const at::Tensor&, const at::Tensor&)>("liger::swiglu_bwd");
  static const auto geglu =
      find_op<Pair(const at::Tensor&, const at::Tensor&, const at::Tensor&, c10::string_view)>(
          "liger::geglu_bwd");
  const at::AutoDispatchBelowADInplaceOrView below;
  return approximate ? geglu.call(dc, a, b, approximate) : swiglu.call(dc, a, b);
}

// da written into a, db into b (declared mutations: the ops mark them written).
inline void bwd_inplace(const at::Tensor& dc, at::Tensor& a, at::Tensor& b, const char* approximate) {
  static const auto swiglu = find_op<void(const at::Tensor&, at::Tensor&, at::Tensor&)>("liger::swiglu_bwd_");
  static const auto geglu =
      find_op<void(const at::Tensor&, at::Tensor&, at::Tensor&, c10::string_view)>("liger::geglu_bwd_");
  const at::AutoDispatchBelowADInplaceOrView below;
  if (approximate)
    geglu.call(dc, a, b, approximate);
  else
    swiglu.call(dc, a, b);
}

}  // namespace glu_ops
}  // namespace liger_cpp
