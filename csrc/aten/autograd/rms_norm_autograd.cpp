// Autograd for liger::rms_norm_fwd (C++ on the Autograd key: why and the pattern in
// autograd_common.h).
//
// Saved: X, W, RSTD (the forward's float32 per-row statistic). RSTD is not an output of the node
// (non-differentiable); a missing dY (the output unused) means no gradient, not zeros.
// Gradients: dX and dW from one liger::rms_norm_bwd call; dW only when W requires grad (a frozen
// weight costs no reduction). in_place=True: dX is written into the incoming dY's storage through
// liger::rms_norm_bwd_ (a declared mutation: dY's version counter records it) when dY is dense, of
// X's shape and dtype, and not traced.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>

#include "aten/autograd/autograd_common.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace rms_norm_autograd_impl {

using namespace autograd;  // NOLINT(build/namespaces)
using Opt = std::optional<at::Tensor>;
using Pair = std::tuple<at::Tensor, at::Tensor>;
using FwdSig = Pair(const at::Tensor&, const Opt&, double, double, c10::string_view, bool);
using BwdSig = Pair(const at::Tensor&, const at::Tensor&, const Opt&, const at::Tensor&, double,
                    c10::string_view, bool);
using BwdInplaceSig = at::Tensor(at::Tensor&, const at::Tensor&, const Opt&, const at::Tensor&, double,
                                 c10::string_view, bool);

const c10::TypedOperatorHandle<FwdSig>& fwd_op() {
  static const auto op = find_op<FwdSig>("liger::rms_norm_fwd");
  return op;
}

// The forward's output dtype (csrc/schema.cpp): promoted with W's in llama mode.
at::ScalarType out_dtype(const at::Tensor& X, const at::Tensor& W, c10::string_view casting) {
  return casting == "llama" && W.defined() ? at::promote_types(X.scalar_type(), W.scalar_type())
                                           : X.scalar_type();
}

struct RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& X, const Opt& W, double eps,
                               double offset, c10::string_view casting_mode, bool in_place,
                               at::Tensor* rstd) {
    auto [Y, RSTD] = [&] {
      const at::AutoDispatchBelowADInplaceOrView below;
      return fwd_op().call(X, W, eps, offset, casting_mode, in_place);
    }();
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({X, value_or_undefined(W), RSTD});
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["casting"] = std::string(casting_mode);
    ctx->saved_data["in_place"] = in_place;
    *rstd = RSTD;
    return {Y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bwd = find_op<BwdSig>("liger::rms_norm_bwd");
    static const auto bwd_inplace = find_op<BwdInplaceSig>("liger::rms_norm_bwd_");
    variable_list out(7);  // X, W, eps, offset, casting_mode, in_place, rstd
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &X = saved[0], &W = saved[1], &RSTD = saved[2];
    const bool need_x = ctx->needs_input_grad(0);
    const bool need_w = W.defined() && ctx->needs_input_grad(1);
    if (!grads[0].defined() || !(need_x || need_w)) return out;
    const std::string casting = ctx->saved_data["casting"].toStringRef();
    const double offset = ctx->saved_data["offset"].toDouble();
    at::Tensor dY = grad_as(grads[0], out_dtype(X, W, casting));
    const Opt w = W.defined() ? Opt(W) : Opt();
    at::Tensor dX, dW;
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      if (ctx->saved_data["in_place"].toBool() && !tracing(dY) && dY.scalar_type() == X.scalar_type() &&
          dY.sizes() == X.sizes() && dY.is_contiguous()) {
        dW = bwd_inplace.call(dY, X, w, RSTD, offset, casting, need_w);
        dX = dY;
      } else {
        std::tie(dX, dW) = bwd.call(dY, X, w, RSTD, offset, casting, need_w);
      }
    }
    if (need_x) out[0] = std::move(dX);
    if (need_w) out[1] = std::move(dW);
    return once_differentiable(std::move(out), "rms_norm", {grads[0]});
  }
};

Pair rms_norm_fwd_autograd(const at::Tensor& X, const Opt& W, double eps, double offset,
                           c10::string_view casting_mode, bool in_place) {
  if (!any_requires_grad(X, W)) {
    const at::AutoDispatchBelowADInplaceOrView below;
    return fwd_op().call(X, W, eps, offset, casting_mode, in_place);
  }
  at::Tensor rstd;
  variable_list y = RmsNormFunction::apply(X, W, eps, offset, casting_mode, in_place, &rstd);
  return {std::move(y[0]), std::move(rstd)};
}

}  // namespace rms_norm_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace rms_norm_autograd_impl;  // NOLINT(build/namespaces)
  m.impl("rms_norm_fwd", &rms_norm_fwd_autograd);
}

}  // namespace liger_cpp
