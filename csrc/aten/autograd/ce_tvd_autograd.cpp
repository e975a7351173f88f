// Autograd of liger::ce_tvd_fwd in C++ (the Autograd dispatch key): ce and tvd are differentiable
// w.r.t. the student logits; the backward (liger::ce_tvd_bwd) rebuilds both distributions from the
// saved logits and the forward's per-row statistics. The teacher and the target get no gradient.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "aten/autograd/autograd_common.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace ce_tvd_autograd_impl {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Opt = std::optional<at::Tensor>;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using FwdSig = Triple(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t);
using BwdSig = at::Tensor(const Opt&, const Opt&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                          const at::Tensor&, int64_t);

const c10::TypedOperatorHandle<FwdSig>& fwd_op() {
  static const auto op = find_op<FwdSig>("liger::ce_tvd_fwd");
  return op;
}
const c10::TypedOperatorHandle<BwdSig>& bwd_op() {
  static const auto op = find_op<BwdSig>("liger::ce_tvd_bwd");
  return op;
}

struct CeTvdFunction : public torch::autograd::Function<CeTvdFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& student, const at::Tensor& teacher,
                               const at::Tensor& target, int64_t ignore_index, at::Tensor* stats_out) {
    auto [ce, tvd, stats] = [&] {
      const at::AutoDispatchBelowADInplaceOrView below;
      return fwd_op().call(student, teacher, target, ignore_index);
    }();
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({student, teacher, target, stats});
    ctx->saved_data["ignore_index"] = ignore_index;
    *stats_out = stats;
    return {ce, tvd};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(5);
    if (!ctx->needs_input_grad(0) || (!grads[0].defined() && !grads[1].defined())) return out;
    const variable_list s = ctx->get_saved_variables();
    auto opt = [](const at::Tensor& t) { return t.defined() ? Opt(t) : std::nullopt; };
    out[0] = bwd_op().call(opt(grads[0]), opt(grads[1]), s[0], s[1], s[2], s[3],
                           ctx->saved_data["ignore_index"].toInt());
    return autograd::once_differentiable(std::move(out), "ce_tvd");
  }
};

Triple ce_tvd_fwd_autograd(const at::Tensor& student, const at::Tensor& teacher, const at::Tensor& target,
                           int64_t ignore_index) {
  if (!autograd::any_requires_grad(student)) {
    const at::AutoDispatchBelowADInplaceOrView below;
    return fwd_op().call(student, teacher, target, ignore_index);
  }
  at::Tensor stats;
  // The teacher enters without history: it gets no gradient (Liger's), whatever it requires.
  variable_list r = CeTvdFunction::apply(student, teacher.detach(), target, ignore_index, &stats);
  return {r[0], r[1], stats};
}

}  // namespace ce_tvd_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace ce_tvd_autograd_impl;  // NOLINT(build/namespaces)
  m.impl("ce_tvd_fwd", &ce_tvd_fwd_autograd);
}

}  // namespace liger_cpp
