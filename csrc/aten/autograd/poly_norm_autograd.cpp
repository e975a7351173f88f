// Autograd for liger::poly_norm_fwd (C++ on the Autograd key: why and the pattern in
// autograd_common.h).
//
// Saved: x, weight, bias (for its gradient's shape and dtype) and rstd (the forward's per-row
// statistics, an out-pointer output: not differentiable). One liger::poly_norm_bwd call gives dx,
// dweight and dbias; each is returned only where needs_input_grad asks for it.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>

#include "aten/autograd/autograd_common.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace poly_norm_autograd_impl {

using namespace autograd;  // NOLINT(build/namespaces)
using Pair = std::tuple<at::Tensor, at::Tensor>;
using FwdSig = Pair(const at::Tensor&, const at::Tensor&, const at::Tensor&, double);
using BwdSig = std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                              const at::Tensor&, const at::Tensor&,
                                                              const at::Tensor&);

const c10::TypedOperatorHandle<FwdSig>& fwd_op() {
  static const auto op = find_op<FwdSig>("liger::poly_norm_fwd");
  return op;
}

struct PolyNormFunction : public torch::autograd::Function<PolyNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, double eps, at::Tensor* rstd) {
    auto [y, r] = [&] {
      const at::AutoDispatchBelowADInplaceOrView below;
      return fwd_op().call(x, weight, bias, eps);
    }();
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({x, weight, bias, r});
    *rstd = r;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bwd = find_op<BwdSig>("liger::poly_norm_bwd");
    variable_list out(5);  // x, weight, bias, eps, rstd
    const variable_list saved = ctx->get_saved_variables();
    const bool need[3] = {ctx->needs_input_grad(0), ctx->needs_input_grad(1), ctx->needs_input_grad(2)};
    if (!grads[0].defined() || !(need[0] || need[1] || need[2])) return out;
    const at::Tensor dy = grad_as(grads[0], saved[0].scalar_type());
    at::Tensor d[3];
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      std::tie(d[0], d[1], d[2]) = bwd.call(dy, saved[0], saved[1], saved[2], saved[3]);
    }
    for (int i = 0; i < 3; ++i)
      if (need[i]) out[i] = std::move(d[i]);
    return once_differentiable(std::move(out), "poly_norm", {grads[0]});
  }
};

Pair poly_norm_fwd_autograd(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                            double eps) {
  if (!any_requires_grad(x, weight, bias)) {
    const at::AutoDispatchBelowADInplaceOrView below;
    return fwd_op().call(x, weight, bias, eps);
  }
  at::Tensor rstd;
  at::Tensor y = PolyNormFunction::apply(x, weight, bias, eps, &rstd);
  return {std::move(y), std::move(rstd)};
}

}  // namespace poly_norm_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace poly_norm_autograd_impl;  // NOLINT(build/namespaces)
  m.impl("poly_norm_fwd", &poly_norm_fwd_autograd);
}

}  // namespace liger_cpp
