// Autograd of liger::fused_linear_kl_div_fwd in C++ (the Autograd dispatch key): the forward
// computes the student head's dX, dW, dB chunk by chunk and the backward scales and hands them out
// (csrc/aten/autograd/forward_grads.h). Differentiable: the student's input, weight and bias; the
// target distribution is data (no gradient).
#include <ATen/ATen.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "aten/autograd/forward_grads.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace fused_linear_kl_div_autograd_impl {

using Opt = std::optional<at::Tensor>;
using Result = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

const fwdgrad::OpSpec& spec() {
  static const fwdgrad::OpSpec s{"liger::fused_linear_kl_div_fwd",
                                 &fwdgrad::find_schema("liger::fused_linear_kl_div_fwd"),
                                 {1, 2, 3},
                                 {11, 12, 13},
                                 {0, 1, 2},  // hidden states, weight and the (M, V) target
                                 false};
  return s;
}

Result kl_div_fwd_autograd(const at::Tensor& student_input, const at::Tensor& student_weight,
                           const at::Tensor& target, const Opt& shift_labels, const Opt& student_bias,
                           c10::string_view reduction, int64_t ignore_index, double temperature, double eps,
                           std::optional<at::ScalarType> accum_dtype, int64_t chunk_rows, bool compute_dx,
                           bool compute_dw, bool compute_db) {
  fwdgrad::Call call{&spec(),
                     c10::impl::boxArgs(student_input, student_weight, target, shift_labels, student_bias,
                                        reduction, ignore_index, temperature, eps, accum_dtype, chunk_rows,
                                        compute_dx, compute_dw, compute_db),
                     {}};
  const std::vector<c10::IValue> o = fwdgrad::apply(call, student_input, student_weight, student_bias);
  return {o[0].toTensor(), o[1].toTensor(), o[2].toTensor(), o[3].toTensor()};
}

}  // namespace fused_linear_kl_div_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace fused_linear_kl_div_autograd_impl;  // NOLINT(build/namespaces)
  m.impl("fused_linear_kl_div_fwd", &kl_div_fwd_autograd);
}

}  // namespace liger_cpp
