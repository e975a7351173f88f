// Autograd for liger::qkv_rope (C++ on the Autograd key: why and the pattern in
// autograd_common.h).
//
// Saved: x, the three weights, cos and sin: what HF's projections and RoPE save between them (the
// rotation's backward needs only cos and sin). Gradients: one qkv_rope_bwd call for those
// needs_input_grad asks for (a frozen weight costs no GEMM). cos and sin get no gradient: an error
// if they require one (the module path, with liger_cpp's rope op, differentiates them).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>

#include "aten/autograd/autograd_common.h"
#include "aten/checks/common.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace qkv_rope_autograd_impl {

using namespace autograd;  // NOLINT(build/namespaces)
using T = const at::Tensor&;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using Opt = std::optional<at::Tensor>;
using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using FwdSig = Triple(T, T, T, T, T, T, int64_t, const Opt&, const Opt&, const Opt&);
using BwdSig = Grads(T, T, T, T, T, T, T, T, T, int64_t, std::array<bool, 7>);

Triple fwd_below(T x, T wq, T wk, T wv, T cos, T sin, int64_t head_dim, const Opt& bq, const Opt& bk,
                 const Opt& bv) {
  static const auto op = find_op<FwdSig>("liger::qkv_rope");
  const at::AutoDispatchBelowADInplaceOrView below;
  return op.call(x, wq, wk, wv, cos, sin, head_dim, bq, bk, bv);
}

struct QkvRopeFunction : public torch::autograd::Function<QkvRopeFunction> {
  static variable_list forward(AutogradContext* ctx, T x, T wq, T wk, T wv, T cos, T sin, int64_t head_dim,
                               const Opt& bq, const Opt& bk, const Opt& bv) {
    auto [q, k, v] = fwd_below(x, wq, wk, wv, cos, sin, head_dim, bq, bk, bv);
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({x, wq, wk, wv, cos, sin});
    ctx->saved_data["head_dim"] = head_dim;
    // which biases were given (each takes a needs_input_grad slot only then)
    ctx->saved_data["biases"] =
        int64_t((bq.has_value() && bq->defined() ? 1 : 0) | (bk.has_value() && bk->defined() ? 2 : 0) |
                (bv.has_value() && bv->defined() ? 4 : 0));
    return {q, k, v};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bwd = find_op<BwdSig>("liger::qkv_rope_bwd");
    variable_list out(10);  // x, w_q, w_k, w_v, cos, sin, head_dim, b_q, b_k, b_v
    const int64_t biases = ctx->saved_data["biases"].toInt();
    InputSlots slots;
    std::array<int, 9> slot{};
    for (int i = 0; i < 6; ++i) slot[i] = slots.add(true);  // x, w_q, w_k, w_v, cos, sin
    for (int i = 0; i < 3; ++i) slot[6 + i] = slots.add((biases >> i) & 1);
    const std::array<bool, 7> mask{needs(ctx, slot[0]), needs(ctx, slot[1]), needs(ctx, slot[2]),
                                   needs(ctx, slot[3]), needs(ctx, slot[6]), needs(ctx, slot[7]),
                                   needs(ctx, slot[8])};
    bool any = false;
    for (bool m : mask) any = any || m;
    if (!(grads[0].defined() || grads[1].defined() || grads[2].defined()) || !any) return out;
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const int64_t head_dim = ctx->saved_data["head_dim"].toInt();
    // An output nobody used has no gradient (set_materialize_grads(false)): zeros of its shape then.
    const auto grad = [&](int i, int64_t rows) {
      if (grads[i].defined()) return grad_as(grads[i], x.scalar_type());
      return at::zeros({x.size(0), rows / head_dim, x.size(1), head_dim}, x.options());
    };
    const at::Tensor dq = grad(0, saved[1].size(0)), dk = grad(1, saved[2].size(0)),
                     dv = grad(2, saved[3].size(0));
    Grads g;
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      g = bwd.call(dq, dk, dv, x, saved[1], saved[2], saved[3], saved[4], saved[5], head_dim, mask);
    }
    auto& [dx, dwq, dwk, dwv, dbq, dbk, dbv] = g;
    if (mask[0]) out[0] = std::move(dx);
    if (mask[1]) out[1] = std::move(dwq);
    if (mask[2]) out[2] = std::move(dwk);
    if (mask[3]) out[3] = std::move(dwv);
    if (mask[4]) out[7] = std::move(dbq);
    if (mask[5]) out[8] = std::move(dbk);
    if (mask[6]) out[9] = std::move(dbv);
    return once_differentiable(std::move(out), "qkv_rope", {grads[0], grads[1], grads[2]});
  }
};

Triple qkv_rope_autograd(T x, T wq, T wk, T wv, T cos, T sin, int64_t head_dim, const Opt& bq, const Opt& bk,
                         const Opt& bv) {
  LIGER_CHECK_ARG(!(at::GradMode::is_enabled() && (requires_grad(cos) || requires_grad(sin))), "cos",
                  "qkv_rope gives cos and sin no gradient: pass them without requires_grad (liger_cpp's rope "
                  "op differentiates them)");
  if (!any_requires_grad(x, wq, wk, wv, bq, bk, bv))
    return fwd_below(x, wq, wk, wv, cos, sin, head_dim, bq, bk, bv);
  variable_list o = QkvRopeFunction::apply(x, wq, wk, wv, cos, sin, head_dim, bq, bk, bv);
  return {std::move(o[0]), std::move(o[1]), std::move(o[2])};
}

}  // namespace qkv_rope_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace qkv_rope_autograd_impl;  // NOLINT(build/namespaces)
  m.impl("qkv_rope", &qkv_rope_autograd);
}

}  // namespace liger_cpp
