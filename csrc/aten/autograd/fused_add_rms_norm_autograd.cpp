// Autograd for liger::fused_add_rms_norm_fwd (C++ on the Autograd key: why and the pattern in
// autograd_common.h).
//
// Outputs with gradients: Y = RMSNorm(S) and S = X + R; RSTD leaves the node (non-differentiable).
// Saved: S, W, RSTD. The backward gives X and R the same gradient dS = dS_out + RMSNorm's dX (one
// liger::fused_add_rms_norm_bwd call; dS_out, the gradient reaching S directly, is passed as None
// when S is unused downstream: no zero tensor). dW only when W requires grad. A missing dY (only
// S used) is the one case with a zero tensor: the backward op needs a dY.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>

#include "aten/autograd/autograd_common.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace fused_add_rms_norm_autograd_impl {

using namespace autograd;  // NOLINT(build/namespaces)
using Opt = std::optional<at::Tensor>;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using FwdSig = Triple(const at::Tensor&, const at::Tensor&, const Opt&, double, double, c10::string_view,
                      bool);
using BwdSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const Opt&, const at::Tensor&,
                                                  const Opt&, const at::Tensor&, double, c10::string_view,
                                                  bool);

const c10::TypedOperatorHandle<FwdSig>& fwd_op() {
  static const auto op = find_op<FwdSig>("liger::fused_add_rms_norm_fwd");
  return op;
}

struct FusedAddRmsNormFunction : public torch::autograd::Function<FusedAddRmsNormFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& X, const at::Tensor& R, const Opt& W,
                               double eps, double offset, c10::string_view casting_mode, bool in_place,
                               at::Tensor* rstd) {
    auto [Y, S, RSTD] = [&] {
      const at::AutoDispatchBelowADInplaceOrView below;
      return fwd_op().call(X, R, W, eps, offset, casting_mode, in_place);
    }();
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({S, value_or_undefined(W), RSTD});
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["casting"] = std::string(casting_mode);
    ctx->saved_data["y_dtype"] = Y.scalar_type();
    *rstd = RSTD;
    return {Y, S};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bwd = find_op<BwdSig>("liger::fused_add_rms_norm_bwd");
    variable_list out(8);  // X, R, W, eps, offset, casting_mode, in_place, rstd
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &S = saved[0], &W = saved[1], &RSTD = saved[2];
    const bool need_x = ctx->needs_input_grad(0), need_r = ctx->needs_input_grad(1);
    const bool need_w = W.defined() && ctx->needs_input_grad(2);
    if ((!grads[0].defined() && !grads[1].defined()) || !(need_x || need_r || need_w)) return out;
    const at::ScalarType y_dtype = ctx->saved_data["y_dtype"].toScalarType();
    at::Tensor dY =
        grads[0].defined() ? grad_as(grads[0], y_dtype) : at::zeros(S.sizes(), S.options().dtype(y_dtype));
    const Opt dS_out = grads[1].defined() ? Opt(grad_as(grads[1], S.scalar_type())) : Opt();
    const Opt w = W.defined() ? Opt(W) : Opt();
    at::Tensor dS, dW;
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      std::tie(dS, dW) = bwd.call(dY, dS_out, S, w, RSTD, ctx->saved_data["offset"].toDouble(),
                                  ctx->saved_data["casting"].toStringRef(), need_w);
    }
    // dX = dR = dS (the same values).
    if (need_x) out[0] = dS;
    if (need_r) out[1] = dS;
    if (need_w) out[2] = std::move(dW);
    return once_differentiable(std::move(out), "fused_add_rms_norm", {grads[0], grads[1]});
  }
};

Triple fused_add_rms_norm_fwd_autograd(const at::Tensor& X, const at::Tensor& R, const Opt& W, double eps,
                                       double offset, c10::string_view casting_mode, bool in_place) {
  if (!any_requires_grad(X, R, W)) {
    const at::AutoDispatchBelowADInplaceOrView below;
    return fwd_op().call(X, R, W, eps, offset, casting_mode, in_place);
  }
  at::Tensor rstd;
  variable_list ys = FusedAddRmsNormFunction::apply(X, R, W, eps, offset, casting_mode, in_place, &rstd);
  return {std::move(ys[0]), std::move(ys[1]), std::move(rstd)};
}

}  // namespace fused_add_rms_norm_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace fused_add_rms_norm_autograd_impl;  // NOLINT(build/namespaces)
  m.impl("fused_add_rms_norm_fwd", &fused_add_rms_norm_fwd_autograd);
}

}  // namespace liger_cpp
