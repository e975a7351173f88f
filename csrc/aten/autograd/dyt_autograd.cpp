// Autograd for liger::dyt_fwd (C++ on the Autograd key: why and the pattern in autograd_common.h).
//
// Saved: x, alpha, gamma (tanh(alpha x) is recomputed in the backward, nothing else is kept) and
// beta (for its gradient's dtype). One liger::dyt_bwd call gives dx, dalpha, dgamma and dbeta;
// each is returned only where needs_input_grad asks for it.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "aten/autograd/autograd_common.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace dyt_autograd_impl {

using namespace autograd;  // NOLINT(build/namespaces)
using Opt = std::optional<at::Tensor>;
using FwdSig = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const Opt&);
using BwdSig = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&,
                                                                          const at::Tensor&,
                                                                          const at::Tensor&,
                                                                          const at::Tensor&, const Opt&);

const c10::TypedOperatorHandle<FwdSig>& fwd_op() {
  static const auto op = find_op<FwdSig>("liger::dyt_fwd");
  return op;
}

struct DytFunction : public torch::autograd::Function<DytFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& alpha,
                            const at::Tensor& gamma, const Opt& beta) {
    at::Tensor y;
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      y = fwd_op().call(x, alpha, gamma, beta);
    }
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({x, alpha, gamma, value_or_undefined(beta)});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bwd = find_op<BwdSig>("liger::dyt_bwd");
    variable_list out(4);  // x, alpha, gamma, beta
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &alpha = saved[1], &gamma = saved[2], &beta = saved[3];
    InputSlots slots;
    const int sx = slots.add(true), sa = slots.add(true), sg = slots.add(true),
              sb = slots.add(beta.defined());
    const bool need[4] = {needs(ctx, sx), needs(ctx, sa), needs(ctx, sg), needs(ctx, sb)};
    if (!grads[0].defined() || !(need[0] || need[1] || need[2] || need[3])) return out;
    const at::Tensor dy = grad_as(grads[0], x.scalar_type());
    at::Tensor d[4];
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      std::tie(d[0], d[1], d[2], d[3]) = bwd.call(dy, x, alpha, gamma, beta.defined() ? Opt(beta) : Opt());
    }
    for (int i = 0; i < 4; ++i)
      if (need[i]) out[i] = std::move(d[i]);
    return once_differentiable(std::move(out), "dyt", {grads[0]});
  }
};

at::Tensor dyt_fwd_autograd(const at::Tensor& x, const at::Tensor& alpha, const at::Tensor& gamma,
                            const Opt& beta) {
  if (!any_requires_grad(x, alpha, gamma, beta)) {
    const at::AutoDispatchBelowADInplaceOrView below;
    return fwd_op().call(x, alpha, gamma, beta);
  }
  return DytFunction::apply(x, alpha, gamma, beta);
}

}  // namespace dyt_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace dyt_autograd_impl;  // NOLINT(build/namespaces)
  m.impl("dyt_fwd", &dyt_fwd_autograd);
}

}  // namespace liger_cpp
