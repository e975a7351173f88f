// Autograd for liger::fused_linear_preference_fwd (DPO and its variants, ORPO, CPO, SimPO) and
// liger::fused_linear_kto_fwd (C++ on the Autograd key: why and the pattern in autograd_common.h).
//
// As Liger's chunked losses, the forward computes dX, dW, dB chunk by chunk (for the compute_*
// flags the Python entry points set from requires_grad) and the backward scales them by the scalar
// grad_output (forward_grads.h); a second backward raises. The node's one output is the loss: the
// metrics leave it non-differentiable, and only input, weight and bias can get gradients (the
// reference model's tensors, the targets, labels and KL are constants of the loss).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <functional>
#include <optional>
#include <tuple>
#include <vector>

#include "aten/autograd/autograd_common.h"
#include "aten/autograd/forward_grads.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace fused_linear_preference_autograd_impl {

using namespace autograd;  // NOLINT(build/namespaces)
using Opt = std::optional<at::Tensor>;
using Outputs = std::vector<at::Tensor>;  // loss, metrics..., dX, dW, dB

struct LossWithForwardGrads : public torch::autograd::Function<LossWithForwardGrads> {
  // run: the op below autograd; flags: the compute_* flags it was given; op: its name for errors.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                               const Opt& bias, const std::function<Outputs()>* run,
                               std::array<bool, 3> flags, const char* op, Outputs* result) {
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      *result = (*run)();
    }
    ctx->set_materialize_grads(false);
    const bool has_bias = bias.has_value() && bias->defined();
    const size_t n = result->size();
    fwdgrad::save_forward_grads(ctx, (*result)[n - 3], (*result)[n - 2], (*result)[n - 1], flags[0], flags[1],
                                flags[2] && has_bias);
    ctx->saved_data["has_bias"] = has_bias;
    ctx->saved_data["op"] = std::string(op);
    return {(*result)[0]};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(7);  // input, weight, bias, run, flags, op, result
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const bool need_x = ctx->needs_input_grad(0), need_w = ctx->needs_input_grad(1);
    const bool need_b = has_bias && ctx->needs_input_grad(2);
    if (!grads[0].defined() || !(need_x || need_w || need_b)) return out;
    const std::string op = ctx->saved_data["op"].toStringRef();
    auto r = fwdgrad::take_forward_grads(
        ctx, grad_as(grads[0], at::kFloat), {need_x, need_w, need_b}, op.c_str(),
        "the functional entry point",
        "the fused preference losses compute their gradients in the forward and the first "
        "backward scales them in place; a second backward through the same graph "
        "(retain_graph=True) is not supported. Run the forward again.");
    out[0] = std::move(r[0]);
    out[1] = std::move(r[1]);
    out[2] = std::move(r[2]);
    return once_differentiable(std::move(out), op.c_str(), {grads[0]});
  }
};

// Runs `run` (the op below autograd) through the node when a gradient can be needed.
Outputs with_autograd(const at::Tensor& input, const at::Tensor& weight, const Opt& bias,
                      const std::function<Outputs()>& run, std::array<bool, 3> flags, const char* op) {
  if (!any_requires_grad(input, weight, bias)) {
    const at::AutoDispatchBelowADInplaceOrView below;
    return run();
  }
  Outputs result;
  variable_list loss = LossWithForwardGrads::apply(input, weight, bias, &run, flags, op, &result);
  result[0] = std::move(loss[0]);
  return result;
}

template <size_t N, size_t... I>
auto as_tuple(Outputs& v, std::index_sequence<I...>) {
  return std::make_tuple(std::move(v[I])...);
}

template <size_t N>
auto as_tuple(Outputs&& v) {
  return as_tuple<N>(v, std::make_index_sequence<N>{});
}

template <typename Tuple, size_t... I>
Outputs as_vector(Tuple&& t, std::index_sequence<I...>) {
  return {std::get<I>(std::forward<Tuple>(t))...};
}

template <typename... T>
Outputs as_vector(std::tuple<T...>&& t) {
  return as_vector(std::move(t), std::index_sequence_for<T...>{});
}

using T12 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                       at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using PrefSig = T12(const at::Tensor&, const at::Tensor&, const at::Tensor&, const Opt&, const Opt&,
                    const Opt&, const Opt&, c10::string_view, int64_t, double, double, bool, bool, double,
                    double, double, int64_t, bool, bool, bool);

T12 preference_fwd_autograd(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& target,
                            const Opt& bias, const Opt& ref_input, const Opt& ref_weight, const Opt& ref_bias,
                            c10::string_view loss_type, int64_t ignore_index, double beta, double alpha,
                            bool compute_nll_loss, bool average_log_prob, double label_smoothing,
                            double gamma, double discopop_tau, int64_t chunk_size, bool compute_dx,
                            bool compute_dw, bool compute_db) {
  static const auto op = find_op<PrefSig>("liger::fused_linear_preference_fwd");
  const std::function<Outputs()> run = [&] {
    return as_vector(op.call(input, weight, target, bias, ref_input, ref_weight, ref_bias, loss_type,
                             ignore_index, beta, alpha, compute_nll_loss, average_log_prob, label_smoothing,
                             gamma, discopop_tau, chunk_size, compute_dx, compute_dw, compute_db));
  };
  return as_tuple<12>(with_autograd(input, weight, bias, run, {compute_dx, compute_dw, compute_db},
                                    "fused_linear_preference_fwd"));
}

using T10 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                       at::Tensor, at::Tensor, at::Tensor>;
using KtoSig = T10(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const Opt&,
                   const Opt&, const Opt&, const Opt&, const Opt&, int64_t, double, bool, int64_t, bool, bool,
                   bool);

T10 kto_fwd_autograd(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& target,
                     const at::Tensor& preference_labels, const Opt& bias, const Opt& ref_input,
                     const Opt& ref_weight, const Opt& ref_bias, const Opt& kl, int64_t ignore_index,
                     double beta, bool average_log_prob, int64_t chunk_size, bool compute_dx, bool compute_dw,
                     bool compute_db) {
  static const auto op = find_op<KtoSig>("liger::fused_linear_kto_fwd");
  const std::function<Outputs()> run = [&] {
    return as_vector(op.call(input, weight, target, preference_labels, bias, ref_input, ref_weight, ref_bias,
                             kl, ignore_index, beta, average_log_prob, chunk_size, compute_dx, compute_dw,
                             compute_db));
  };
  return as_tuple<10>(
      with_autograd(input, weight, bias, run, {compute_dx, compute_dw, compute_db}, "fused_linear_kto_fwd"));
}

}  // namespace fused_linear_preference_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace fused_linear_preference_autograd_impl;  // NOLINT(build/namespaces)

  m.impl("fused_linear_preference_fwd", &preference_fwd_autograd);
  m.impl("fused_linear_kto_fwd", &kto_fwd_autograd);
}

}  // namespace liger_cpp
