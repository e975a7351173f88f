// Autograd of liger::fused_linear_grpo_fwd in C++ (the Autograd dispatch key): the forward
// computes dX, dW, dB chunk by chunk and the backward scales and hands them out
// (csrc/aten/autograd/forward_grads.h). Differentiable: input, weight, bias; the token ids, mask,
// advantages, old / reference log-probs and the reference model get no gradient (Liger's).
#include <ATen/ATen.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "aten/autograd/forward_grads.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace fused_linear_grpo_autograd_impl {

using Opt = std::optional<at::Tensor>;
using GrpoResult =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

const fwdgrad::OpSpec& spec() {
  static const fwdgrad::OpSpec s{"liger::fused_linear_grpo_fwd",
                                 &fwdgrad::find_schema("liger::fused_linear_grpo_fwd"),
                                 {4, 5, 6},
                                 {29, 30, 31},
                                 {0, 1, 8, 9},  // input, weight, ref_input, ref_weight
                                 false};
  return s;
}

GrpoResult grpo_fwd_autograd(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& ids,
                             const at::Tensor& mask, const at::Tensor& adv, const Opt& bias,
                             const Opt& ref_lp, const Opt& old_lp, const Opt& ref_input,
                             const Opt& ref_weight, const Opt& ref_bias, const Opt& vllm,
                             const Opt& normalizer, c10::string_view loss_type, c10::string_view level,
                             double beta, double eps_low, double eps_high, std::optional<double> delta,
                             double temperature, std::optional<int64_t> max_len, bool bias_kl,
                             double sapo_pos, double sapo_neg, double vk_pos, double vl_pos, double vk_neg,
                             double vl_neg, int64_t chunk_rows, bool compute_dx, bool compute_dw,
                             bool compute_db) {
  fwdgrad::Call call{
      &spec(),
      c10::impl::boxArgs(input, weight, ids, mask, adv, bias, ref_lp, old_lp, ref_input, ref_weight, ref_bias,
                         vllm, normalizer, loss_type, level, beta, eps_low, eps_high, delta, temperature,
                         max_len, bias_kl, sapo_pos, sapo_neg, vk_pos, vl_pos, vk_neg, vl_neg, chunk_rows,
                         compute_dx, compute_dw, compute_db),
      {}};
  const std::vector<c10::IValue> o = fwdgrad::apply(call, input, weight, bias);
  return {o[0].toTensor(), o[1].toTensor(), o[2].toTensor(), o[3].toTensor(),
          o[4].toTensor(), o[5].toTensor(), o[6].toTensor()};
}

}  // namespace fused_linear_grpo_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace fused_linear_grpo_autograd_impl;  // NOLINT(build/namespaces)
  m.impl("fused_linear_grpo_fwd", &grpo_fwd_autograd);
}

}  // namespace liger_cpp
