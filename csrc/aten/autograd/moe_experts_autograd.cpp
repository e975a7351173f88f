// Autograd for liger::moe_experts_fwd in C++ (the Autograd dispatch key): the backward calls
// liger::moe_experts_bwd with the forward's saved gate_up output and routing, never entering Python.
// Only `out` is differentiable; gradients flow to hidden, top_k_weights, both projections and both
// biases (the index gets none). Once-differentiable, as Liger's.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <string>
#include <tuple>

namespace liger_cpp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using OptT = c10::optional<at::Tensor>;
using Six = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using FwdSig = Six(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                   const at::Tensor&, const OptT&, const OptT&, c10::string_view, bool, bool, double, double);
using BwdSig = Six(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                   const at::Tensor&, const OptT&, const OptT&, const at::Tensor&, const at::Tensor&,
                   const at::Tensor&, const at::Tensor&, const at::Tensor&, c10::string_view, bool, bool,
                   double, double);

OptT opt(const at::Tensor& t) { return t.defined() ? OptT(t) : OptT(); }

struct MoeExpertsFunction : public torch::autograd::Function<MoeExpertsFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& top_k_index,
                               const at::Tensor& top_k_weights, const at::Tensor& gate_up_proj,
                               const at::Tensor& down_proj, const OptT& gate_up_bias_, const OptT& down_bias_,
                               const std::string& activation, bool transposed, bool interleaved, double alpha,
                               double limit) {
    static const auto fwd =
        c10::Dispatcher::singleton().findSchemaOrThrow("liger::moe_experts_fwd", "").typed<FwdSig>();
    // Optional tensors: absent ones are not autograd inputs (needs_input_grad counts the others).
    const at::Tensor gate_up_bias = gate_up_bias_.value_or(at::Tensor());
    const at::Tensor down_bias = down_bias_.value_or(at::Tensor());
    Six r;
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      r = fwd.call(hidden, top_k_index, top_k_weights, gate_up_proj, down_proj, opt(gate_up_bias),
                   opt(down_bias), activation, transposed, interleaved, alpha, limit);
    }
    auto& [out, gu, offsets, sorted_slot, slot_row, sorted_expert] = r;
    ctx->save_for_backward({hidden, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias, gu,
                            offsets, sorted_slot, slot_row, sorted_expert});
    ctx->saved_data["activation"] = activation;
    ctx->saved_data["transposed"] = transposed;
    ctx->saved_data["interleaved"] = interleaved;
    ctx->saved_data["alpha"] = alpha;
    ctx->saved_data["limit"] = limit;
    ctx->mark_non_differentiable({gu, offsets, sorted_slot, slot_row, sorted_expert});
    return {out, gu, offsets, sorted_slot, slot_row, sorted_expert};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bwd =
        c10::Dispatcher::singleton().findSchemaOrThrow("liger::moe_experts_bwd", "").typed<BwdSig>();
    variable_list none(12);
    const at::Tensor& g = grads[0];
    if (!g.defined()) return none;
    const auto s = ctx->get_saved_variables();
    const std::string act = ctx->saved_data["activation"].toStringRef();
    auto [dx, dw, dgu, ddown, dgub, ddb] =
        bwd.call(g, s[0], s[1], s[2], s[3], opt(s[4]), opt(s[5]), s[6], s[7], s[8], s[9], s[10], act,
                 ctx->saved_data["transposed"].toBool(), ctx->saved_data["interleaved"].toBool(),
                 ctx->saved_data["alpha"].toDouble(), ctx->saved_data["limit"].toDouble());
    variable_list out(12);
    if (ctx->needs_input_grad(0)) out[0] = dx;
    if (ctx->needs_input_grad(2)) out[2] = dw;
    if (ctx->needs_input_grad(3)) out[3] = dgu;
    if (ctx->needs_input_grad(4)) out[4] = ddown;
    if (s[4].defined() && ctx->needs_input_grad(5)) out[5] = dgub;
    if (s[5].defined() && ctx->needs_input_grad(s[4].defined() ? 6 : 5)) out[6] = ddb;
    return out;
  }
};

Six moe_experts_fwd_autograd(const at::Tensor& hidden, const at::Tensor& top_k_index,
                             const at::Tensor& top_k_weights, const at::Tensor& gate_up_proj,
                             const at::Tensor& down_proj, const OptT& gate_up_bias, const OptT& down_bias,
                             c10::string_view activation, bool transposed, bool interleaved, double alpha,
                             double limit) {
  const auto r = MoeExpertsFunction::apply(
      hidden, top_k_index, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias,
      std::string(activation.data(), activation.size()), transposed, interleaved, alpha, limit);
  return {r[0], r[1], r[2], r[3], r[4], r[5]};
}

}  // namespace

TORCH_LIBRARY_IMPL(liger, Autograd, m) { m.impl("moe_experts_fwd", &moe_experts_fwd_autograd); }

}  // namespace liger_cpp
