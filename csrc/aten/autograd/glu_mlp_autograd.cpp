// Autograd for liger::glu_mlp (C++ on the Autograd key: why and the pattern in
// autograd_common.h).
//
// Saved: x, the three weights, and the forward's a, b (the projections) and c (the gated product,
// the down projection's input): what nn.Linear and the GLU save between them, no more. a, b and c
// come from liger::glu_mlp_fwd and are not outputs of glu_mlp, so nothing outside the node holds
// them.
// Gradients: one glu_mlp_bwd call for those needs_input_grad asks for (a frozen weight costs no
// GEMM). in_place=True: dc, da and db are written into c, a and b through glu_mlp_bwd_ (declared
// mutations: their version counters record them, so a second backward through a retained graph
// raises instead of reading them), eagerly only; the backward then allocates no (M, I) buffer.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <array>
#include <string>
#include <tuple>

#include "aten/autograd/autograd_common.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace glu_mlp_autograd_impl {

using namespace autograd;  // NOLINT(build/namespaces)
using T = const at::Tensor&;
using Quad = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using FwdSig = Quad(T, T, T, T, c10::string_view);
using OpSig = at::Tensor(T, T, T, T, c10::string_view, bool);
using BwdSig = Quad(T, T, T, T, T, T, T, T, c10::string_view, std::array<bool, 4>);
using BwdInplaceSig = Quad(T, T, T, T, T, at::Tensor&, at::Tensor&, at::Tensor&, c10::string_view,
                           std::array<bool, 4>);

Quad fwd_below(T x, T wg, T wu, T wd, c10::string_view activation) {
  static const auto op = find_op<FwdSig>("liger::glu_mlp_fwd");
  const at::AutoDispatchBelowADInplaceOrView below;
  return op.call(x, wg, wu, wd, activation);
}

struct GluMlpFunction : public torch::autograd::Function<GluMlpFunction> {
  static variable_list forward(AutogradContext* ctx, T x, T wg, T wu, T wd, c10::string_view activation,
                               bool in_place) {
    auto [y, a, b, c] = fwd_below(x, wg, wu, wd, activation);
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({x, wg, wu, wd, a, b, c});
    ctx->saved_data["activation"] = std::string(activation);
    ctx->saved_data["in_place"] = in_place;
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bwd = find_op<BwdSig>("liger::glu_mlp_bwd");
    static const auto bwd_inplace = find_op<BwdInplaceSig>("liger::glu_mlp_bwd_");
    variable_list out(6);  // x, w_gate, w_up, w_down, activation, in_place
    const std::array<bool, 4> mask{ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                   ctx->needs_input_grad(2), ctx->needs_input_grad(3)};
    if (!grads[0].defined() || !(mask[0] || mask[1] || mask[2] || mask[3])) return out;
    variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &wg = saved[1], &wu = saved[2], &wd = saved[3];
    at::Tensor &a = saved[4], &b = saved[5], &c = saved[6];
    const std::string activation = ctx->saved_data["activation"].toStringRef();
    const at::Tensor dy = grad_as(grads[0], x.scalar_type());
    Quad g;
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      if (ctx->saved_data["in_place"].toBool() && !tracing(dy) && !tracing(a) && a.is_contiguous() &&
          b.is_contiguous() && c.is_contiguous())
        g = bwd_inplace.call(dy, x, wg, wu, wd, a, b, c, activation, mask);
      else
        g = bwd.call(dy, x, wg, wu, wd, a, b, c, activation, mask);
    }
    auto& [dx, dwg, dwu, dwd] = g;
    if (mask[0]) out[0] = std::move(dx);
    if (mask[1]) out[1] = std::move(dwg);
    if (mask[2]) out[2] = std::move(dwu);
    if (mask[3]) out[3] = std::move(dwd);
    return once_differentiable(std::move(out), "glu_mlp", {grads[0]});
  }
};

at::Tensor glu_mlp_autograd(T x, T wg, T wu, T wd, c10::string_view activation, bool in_place) {
  if (!any_requires_grad(x, wg, wu, wd)) {
    static const auto op = find_op<OpSig>("liger::glu_mlp");
    const at::AutoDispatchBelowADInplaceOrView below;
    return op.call(x, wg, wu, wd, activation, in_place);
  }
  return GluMlpFunction::apply(x, wg, wu, wd, activation, in_place)[0];
}

// glu_mlp_tiled: saves x and the weights only; the backward computes each shard's forward again
// (glu_mlp_tiled_bwd).
using TiledSig = at::Tensor(T, T, T, T, c10::string_view, int64_t);
using TiledBwdSig = Quad(T, T, T, T, T, c10::string_view, int64_t, std::array<bool, 4>);

struct GluMlpTiledFunction : public torch::autograd::Function<GluMlpTiledFunction> {
  static variable_list forward(AutogradContext* ctx, T x, T wg, T wu, T wd, c10::string_view activation,
                               int64_t shards) {
    static const auto op = find_op<TiledSig>("liger::glu_mlp_tiled");
    at::Tensor y;
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      y = op.call(x, wg, wu, wd, activation, shards);
    }
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({x, wg, wu, wd});
    ctx->saved_data["activation"] = std::string(activation);
    ctx->saved_data["shards"] = shards;
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bwd = find_op<TiledBwdSig>("liger::glu_mlp_tiled_bwd");
    variable_list out(6);  // x, w_gate, w_up, w_down, activation, shards
    const std::array<bool, 4> mask{ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                   ctx->needs_input_grad(2), ctx->needs_input_grad(3)};
    if (!grads[0].defined() || !(mask[0] || mask[1] || mask[2] || mask[3])) return out;
    variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &wg = saved[1], &wu = saved[2], &wd = saved[3];
    const at::Tensor dy = grad_as(grads[0], x.scalar_type());
    Quad g;
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      g = bwd.call(dy, x, wg, wu, wd, ctx->saved_data["activation"].toStringRef(),
                   ctx->saved_data["shards"].toInt(), mask);
    }
    auto& [dx, dwg, dwu, dwd] = g;
    if (mask[0]) out[0] = std::move(dx);
    if (mask[1]) out[1] = std::move(dwg);
    if (mask[2]) out[2] = std::move(dwu);
    if (mask[3]) out[3] = std::move(dwd);
    return once_differentiable(std::move(out), "glu_mlp_tiled", {grads[0]});
  }
};

at::Tensor glu_mlp_tiled_autograd(T x, T wg, T wu, T wd, c10::string_view activation, int64_t shards) {
  if (!any_requires_grad(x, wg, wu, wd)) {
    static const auto op = find_op<TiledSig>("liger::glu_mlp_tiled");
    const at::AutoDispatchBelowADInplaceOrView below;
    return op.call(x, wg, wu, wd, activation, shards);
  }
  return GluMlpTiledFunction::apply(x, wg, wu, wd, activation, shards)[0];
}

}  // namespace glu_mlp_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace glu_mlp_autograd_impl;  // NOLINT(build/namespaces)
  m.impl("glu_mlp", &glu_mlp_autograd);
  m.impl("glu_mlp_tiled", &glu_mlp_tiled_autograd);
}

}  // namespace liger_cpp
