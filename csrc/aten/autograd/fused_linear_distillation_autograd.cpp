// Autograd of liger::fused_linear_distillation_fwd in C++ (the Autograd dispatch key): the forward
// computes the student's dX, dW, dB chunk by chunk and the backward scales and hands them out
// (csrc/aten/autograd/forward_grads.h). Differentiable: the student's input, weight and bias; the
// teacher gets no gradient, and soft_loss / hard_loss are logged values without history.
#include <ATen/ATen.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "aten/autograd/forward_grads.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace fused_linear_distillation_autograd_impl {

using Opt = std::optional<at::Tensor>;
using Result = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

const fwdgrad::OpSpec& spec() {
  static const fwdgrad::OpSpec s{"liger::fused_linear_distillation_fwd",
                                 &fwdgrad::find_schema("liger::fused_linear_distillation_fwd"),
                                 {3, 4, 5},
                                 {15, 16, 17},
                                 {0, 1, 2, 3},  // the hidden states and weights of both heads
                                 false};
  return s;
}

Result distillation_fwd_autograd(const at::Tensor& student_input, const at::Tensor& student_weight,
                                 const at::Tensor& teacher_input, const at::Tensor& teacher_weight,
                                 const Opt& target, const Opt& student_bias, const Opt& teacher_bias,
                                 c10::string_view loss, double weight_hard_loss, double weight_soft_loss,
                                 double beta, int64_t ignore_index, double temperature, bool mask_soft,
                                 int64_t chunk_rows, bool compute_dx, bool compute_dw, bool compute_db,
                                 bool compute_hard) {
  fwdgrad::Call call{&spec(),
                     c10::impl::boxArgs(student_input, student_weight, teacher_input, teacher_weight, target,
                                        student_bias, teacher_bias, loss, weight_hard_loss, weight_soft_loss,
                                        beta, ignore_index, temperature, mask_soft, chunk_rows, compute_dx,
                                        compute_dw, compute_db, compute_hard),
                     {}};
  const std::vector<c10::IValue> o = fwdgrad::apply(call, student_input, student_weight, student_bias);
  return {o[0].toTensor(), o[1].toTensor(), o[2].toTensor(),
          o[3].toTensor(), o[4].toTensor(), o[5].toTensor()};
}

}  // namespace fused_linear_distillation_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace fused_linear_distillation_autograd_impl;  // NOLINT(build/namespaces)

  m.impl("fused_linear_distillation_fwd", &distillation_fwd_autograd);
}

}  // namespace liger_cpp
