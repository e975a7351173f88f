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
#include <tuple>

#include "aten/autograd/autograd_common.h"
#include "aten/checks/common.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace qkv_rope_autograd_impl {

using namespace autograd;  // NOLINT(build/namespaces)
using T = const at::Tensor&;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using Quad = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using FwdSig = Triple(T, T, T, T, T, T, int64_t);
using BwdSig = Quad(T, T, T, T, T, T, T, T, T, int64_t, std::array<bool, 4>);

Triple fwd_below(T x, T wq, T wk, T wv, T cos, T sin, int64_t head_dim) {
  static const auto op = find_op<FwdSig>("liger::qkv_rope");
  const at::AutoDispatchBelowADInplaceOrView below;
  return op.call(x, wq, wk, wv, cos, sin, head_dim);
}

struct QkvRopeFunction : public torch::autograd::Function<QkvRopeFunction> {
  static variable_list forward(AutogradContext* ctx, T x, T wq, T wk, T wv, T cos, T sin, int64_t head_dim) {
    auto [q, k, v] = fwd_below(x, wq, wk, wv, cos, sin, head_dim);
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({x, wq, wk, wv, cos, sin});
    ctx->saved_data["head_dim"] = head_dim;
    return {q, k, v};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bwd = find_op<BwdSig>("liger::qkv_rope_bwd");
    variable_list out(7);  // x, w_q, w_k, w_v, cos, sin, head_dim
    const std::array<bool, 4> mask{ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                   ctx->needs_input_grad(2), ctx->needs_input_grad(3)};
    if (!(grads[0].defined() || grads[1].defined() || grads[2].defined()) ||
        !(mask[0] || mask[1] || mask[2] || mask[3]))
      return out;
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
    Quad g;
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      g = bwd.call(dq, dk, dv, x, saved[1], saved[2], saved[3], saved[4], saved[5], head_dim, mask);
    }
    auto& [dx, dwq, dwk, dwv] = g;
    if (mask[0]) out[0] = std::move(dx);
    if (mask[1]) out[1] = std::move(dwq);
    if (mask[2]) out[2] = std::move(dwk);
    if (mask[3]) out[3] = std::move(dwv);
    return once_differentiable(std::move(out), "qkv_rope", {grads[0], grads[1], grads[2]});
  }
};

Triple qkv_rope_autograd(T x, T wq, T wk, T wv, T cos, T sin, int64_t head_dim) {
  LIGER_CHECK_ARG(!(at::GradMode::is_enabled() && (requires_grad(cos) || requires_grad(sin))), "cos",
                  "qkv_rope gives cos and sin no gradient: pass them without requires_grad (liger_cpp's rope "
                  "op differentiates them)");
  if (!any_requires_grad(x, wq, wk, wv)) return fwd_below(x, wq, wk, wv, cos, sin, head_dim);
  variable_list o = QkvRopeFunction::apply(x, wq, wk, wv, cos, sin, head_dim);
  return {std::move(o[0]), std::move(o[1]), std::move(o[2])};
}

}  // namespace qkv_rope_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace qkv_rope_autograd_impl;  // NOLINT(build/namespaces)
  m.impl("qkv_rope", &qkv_rope_autograd);
}

}  // namespace liger_cpp
