// Autograd for liger::relu_squared_fwd in C++ (the Autograd dispatch key), as for RoPE and the
// cross entropy: the backward never enters Python. dx = relu_squared_bwd(dy, x); x is saved (the
// activation is recomputed from it, no second buffer is kept). The backward is not differentiable
// again (once-differentiable, like Liger's).
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "aten/op_handle.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace relu_squared_autograd_impl {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Unary = at::Tensor(const at::Tensor&);
using Binary = at::Tensor(const at::Tensor&, const at::Tensor&);

struct ReluSquaredFunction : public torch::autograd::Function<ReluSquaredFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x) {
    static const auto fwd = find_op<Unary>("liger::relu_squared_fwd");
    at::Tensor y;
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      y = fwd.call(x);
    }
    ctx->save_for_backward({x});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bwd = find_op<Binary>("liger::relu_squared_bwd");
    const at::Tensor x = ctx->get_saved_variables()[0];
    at::Tensor g = grads[0];
    if (!g.defined() || !ctx->needs_input_grad(0)) return {at::Tensor()};
    if (g.scalar_type() != x.scalar_type()) g = g.to(x.scalar_type());
    return {bwd.call(g, x)};
  }
};

at::Tensor relu_squared_fwd_autograd(const at::Tensor& x) { return ReluSquaredFunction::apply(x); }

}  // namespace relu_squared_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace relu_squared_autograd_impl;  // NOLINT(build/namespaces)
  m.impl("relu_squared_fwd", &relu_squared_fwd_autograd);
}

}  // namespace liger_cpp
