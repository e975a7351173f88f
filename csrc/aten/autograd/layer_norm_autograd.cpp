// Autograd for liger::layer_norm_fwd (C++ on the Autograd key: why and the pattern in
// autograd_common.h).
//
// Saved: X, W and the forward's MEAN and RSTD (non-differentiable, not outputs of the node). One
// liger::layer_norm_bwd call gives dX, dW and dB, each reduction only when that parameter requires
// grad. Without W the op returns dB in float32 for 16-bit X (a wider bias's gradient is not rounded
// to X's dtype); it is cast to B's dtype here, once.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "aten/autograd/autograd_common.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace layer_norm_autograd_impl {

using namespace autograd;  // NOLINT(build/namespaces)
using Opt = std::optional<at::Tensor>;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using FwdSig = Triple(const at::Tensor&, const Opt&, const Opt&, double);
using BwdSig = Triple(const at::Tensor&, const at::Tensor&, const Opt&, const at::Tensor&, const at::Tensor&,
                      bool, bool);

const c10::TypedOperatorHandle<FwdSig>& fwd_op() {
  static const auto op = find_op<FwdSig>("liger::layer_norm_fwd");
  return op;
}

struct LayerNormFunction : public torch::autograd::Function<LayerNormFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& X, const Opt& W, const Opt& B,
                               double eps, at::Tensor* mean, at::Tensor* rstd) {
    auto [Y, MEAN, RSTD] = [&] {
      const at::AutoDispatchBelowADInplaceOrView below;
      return fwd_op().call(X, W, B, eps);
    }();
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({X, value_or_undefined(W), MEAN, RSTD});
    const bool has_b = B.has_value() && B->defined();
    ctx->saved_data["b_dtype"] = has_b ? c10::IValue(B->scalar_type()) : c10::IValue();
    *mean = MEAN;
    *rstd = RSTD;
    return {Y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bwd = find_op<BwdSig>("liger::layer_norm_bwd");
    variable_list out(6);  // X, W, B, eps, mean, rstd
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &X = saved[0], &W = saved[1], &MEAN = saved[2], &RSTD = saved[3];
    const c10::IValue& b_dtype = ctx->saved_data["b_dtype"];
    InputSlots slots;
    const int sx = slots.add(true), sw = slots.add(W.defined()), sb = slots.add(!b_dtype.isNone());
    const bool need_x = needs(ctx, sx), need_w = needs(ctx, sw), need_b = needs(ctx, sb);
    if (!grads[0].defined() || !(need_x || need_w || need_b)) return out;
    const at::Tensor dY = grad_as(grads[0], X.scalar_type());
    at::Tensor dX, dW, dB;
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      std::tie(dX, dW, dB) = bwd.call(dY, X, W.defined() ? Opt(W) : Opt(), MEAN, RSTD, /*compute_dw=*/need_w,
                                      /*compute_db=*/need_b);
      if (need_b && dB.scalar_type() != b_dtype.toScalarType()) dB = dB.to(b_dtype.toScalarType());
    }
    if (need_x) out[0] = std::move(dX);
    if (need_w) out[1] = std::move(dW);
    if (need_b) out[2] = std::move(dB);
    return once_differentiable(std::move(out), "layer_norm", {grads[0]});
  }
};

Triple layer_norm_fwd_autograd(const at::Tensor& X, const Opt& W, const Opt& B, double eps) {
  if (!any_requires_grad(X, W, B)) {
    const at::AutoDispatchBelowADInplaceOrView below;
    return fwd_op().call(X, W, B, eps);
  }
  at::Tensor mean, rstd;
  variable_list y = LayerNormFunction::apply(X, W, B, eps, &mean, &rstd);
  return {std::move(y[0]), std::move(mean), std::move(rstd)};
}

}  // namespace layer_norm_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace layer_norm_autograd_impl;  // NOLINT(build/namespaces)
  m.impl("layer_norm_fwd", &layer_norm_fwd_autograd);
}

}  // namespace liger_cpp
