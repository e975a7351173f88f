// Autograd for liger::moe_experts_fwd (C++ on the Autograd key: why and the pattern in
// autograd_common.h).
//
// The node's one output is `out`; the forward's other outputs (gate_up and the int32 routing) leave
// through out-pointers, saved for liger::moe_experts_bwd. Gradients: hidden, top_k_weights, both
// projections and both biases (the index gets none). The backward skips the dX GEMM + gather-sum
// when hidden needs no gradient and the four expert-weight products (two GEMMs, two bias sums, the
// second gather) when no expert weight does (frozen experts); d top_k_weights comes from the
// activation-backward kernel either way. Once differentiable, as Liger's.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>

#include "aten/autograd/autograd_common.h"

namespace liger_cpp {
namespace moe_experts_autograd_impl {

using namespace autograd;  // NOLINT(build/namespaces)
using Opt = std::optional<at::Tensor>;
using Six = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using FwdSig = Six(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                   const at::Tensor&, const Opt&, const Opt&, c10::string_view, bool, bool, double, double);
using BwdSig = Six(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                   const at::Tensor&, const Opt&, const Opt&, const at::Tensor&, const at::Tensor&,
                   const at::Tensor&, const at::Tensor&, const at::Tensor&, c10::string_view, bool, bool,
                   double, double, bool, bool);

const c10::TypedOperatorHandle<FwdSig>& fwd_op() {
  static const auto op = find_op<FwdSig>("liger::moe_experts_fwd");
  return op;
}

struct MoeExpertsFunction : public torch::autograd::Function<MoeExpertsFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& top_k_index,
                               const at::Tensor& top_k_weights, const at::Tensor& gate_up_proj,
                               const at::Tensor& down_proj, const Opt& gate_up_bias, const Opt& down_bias,
                               c10::string_view activation, bool transposed, bool interleaved, double alpha,
                               double limit, Six* rest) {
    Six r = [&] {
      const at::AutoDispatchBelowADInplaceOrView below;
      return fwd_op().call(hidden, top_k_index, top_k_weights, gate_up_proj, down_proj, gate_up_bias,
                           down_bias, activation, transposed, interleaved, alpha, limit);
    }();
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({hidden, top_k_weights, gate_up_proj, down_proj, value_or_undefined(gate_up_bias),
                            value_or_undefined(down_bias), std::get<1>(r), std::get<2>(r), std::get<3>(r),
                            std::get<4>(r), std::get<5>(r)});
    ctx->saved_data["activation"] = std::string(activation);
    ctx->saved_data["flags"] = static_cast<int64_t>(transposed) | (static_cast<int64_t>(interleaved) << 1);
    ctx->saved_data["alpha"] = alpha;
    ctx->saved_data["limit"] = limit;
    *rest = r;
    return {std::get<0>(r)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bwd = find_op<BwdSig>("liger::moe_experts_bwd");
    // hidden, top_k_index, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias,
    // activation, transposed, interleaved, alpha, limit, rest
    variable_list out(13);
    const variable_list s = ctx->get_saved_variables();
    InputSlots slots;
    const int sx = slots.add(true), si = slots.add(true), sw = slots.add(true), sgu = slots.add(true),
              sdn = slots.add(true), sgub = slots.add(s[4].defined()), sdb = slots.add(s[5].defined());
    (void)si;
    const bool need_x = needs(ctx, sx), need_w = needs(ctx, sw);
    const bool need_gu = needs(ctx, sgu), need_dn = needs(ctx, sdn), need_gub = needs(ctx, sgub),
               need_db = needs(ctx, sdb);
    const bool need_experts = need_gu || need_dn || need_gub || need_db;
    if (!grads[0].defined() || !(need_x || need_w || need_experts)) return out;
    const at::Tensor g = grad_as(grads[0], s[0].scalar_type());
    const int64_t flags = ctx->saved_data["flags"].toInt();
    Six r;
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      r = bwd.call(g, s[0], s[1], s[2], s[3], s[4].defined() ? Opt(s[4]) : Opt(),
                   s[5].defined() ? Opt(s[5]) : Opt(), s[6], s[7], s[8], s[9], s[10],
                   ctx->saved_data["activation"].toStringRef(), flags & 1, (flags >> 1) & 1,
                   ctx->saved_data["alpha"].toDouble(), ctx->saved_data["limit"].toDouble(), need_x,
                   need_experts);
    }
    auto& [dx, dw, dgu, ddn, dgub, ddb] = r;
    if (need_x) out[0] = std::move(dx);
    if (need_w) out[2] = std::move(dw);
    if (need_gu) out[3] = std::move(dgu);
    if (need_dn) out[4] = std::move(ddn);
    if (need_gub) out[5] = std::move(dgub);
    if (need_db) out[6] = std::move(ddb);
    return once_differentiable(std::move(out), "moe_experts", {grads[0]});
  }
};

Six moe_experts_fwd_autograd(const at::Tensor& hidden, const at::Tensor& top_k_index,
                             const at::Tensor& top_k_weights, const at::Tensor& gate_up_proj,
                             const at::Tensor& down_proj, const Opt& gate_up_bias, const Opt& down_bias,
                             c10::string_view activation, bool transposed, bool interleaved, double alpha,
                             double limit) {
  if (!any_requires_grad(hidden, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias)) {
    const at::AutoDispatchBelowADInplaceOrView below;
    return fwd_op().call(hidden, top_k_index, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias,
                         activation, transposed, interleaved, alpha, limit);
  }
  Six rest;
  variable_list y =
      MoeExpertsFunction::apply(hidden, top_k_index, top_k_weights, gate_up_proj, down_proj, gate_up_bias,
                                down_bias, activation, transposed, interleaved, alpha, limit, &rest);
  std::get<0>(rest) = std::move(y[0]);
  return rest;
}

}  // namespace moe_experts_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace moe_experts_autograd_impl;  // NOLINT(build/namespaces)
  m.impl("moe_experts_fwd", &moe_experts_fwd_autograd);
}

}  // namespace liger_cpp
