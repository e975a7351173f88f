// Autograd for liger::fused_linear_cross_entropy_fwd (C++ on the Autograd key: why and the pattern
// in autograd_common.h).
//
// The node's one output is the loss; z_loss, token_accuracy and predicted_tokens (for logging: the
// z term is already in the loss) and the forward's gradient buffers leave it non-differentiable,
// and unused outputs get no zero-filled gradients (dX- and dW-sized ones otherwise).
// - reduction "mean" / "sum": the forward computed dX, dW, dB for the inputs that need them (the
//   compute_* flags, set by liger_cpp.ops.fused_linear_cross_entropy); the backward scales them by
//   the scalar grad_output (forward_grads.h). A second backward through the graph raises.
// - reduction "none": the forward computed only the losses; the backward reruns the chunk loop
//   (liger::fused_linear_cross_entropy_bwd) with the per-token grad_output folded into each row's
//   dlogits before the GEMMs sum over rows (Liger issues #488 / #968), for the inputs that need a
//   gradient; it can run again (retain_graph).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>

#include "aten/autograd/autograd_common.h"
#include "aten/autograd/forward_grads.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace fused_linear_cross_entropy_autograd_impl {

using namespace autograd;  // NOLINT(build/namespaces)
using Opt = std::optional<at::Tensor>;
using T7 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using T3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using OptDtype = std::optional<at::ScalarType>;
using OptDouble = std::optional<double>;
using FwdSig = T7(const at::Tensor&, const at::Tensor&, const at::Tensor&, const Opt&, const Opt&, int64_t,
                  double, double, c10::string_view, double, double, bool, bool, bool, bool, bool, bool,
                  OptDtype, int64_t, bool, OptDouble);
using BwdSig = T3(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const Opt&,
                  const Opt&, int64_t, double, double, c10::string_view, double, double, bool, bool, bool,
                  OptDtype, int64_t, bool, OptDouble);

// The op's non-tensor arguments.
struct Options {
  int64_t ignore_index;
  double lse_square_scale, label_smoothing;
  std::string reduction;
  double softcap, logit_scale;
  bool return_z_loss, return_token_accuracy, return_predicted_tokens, compute_dx, compute_dw, compute_db;
  OptDtype accum_dtype;
  int64_t chunk_rows;
  bool use_token_scaling;
  OptDouble chunk_budget_mib;
};

const c10::TypedOperatorHandle<FwdSig>& fwd_op() {
  static const auto op = find_op<FwdSig>("liger::fused_linear_cross_entropy_fwd");
  return op;
}

T7 call_fwd(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& target, const Opt& bias,
            const Opt& ce_weight, const Options& o) {
  const at::AutoDispatchBelowADInplaceOrView below;
  return fwd_op().call(input, weight, target, bias, ce_weight, o.ignore_index, o.lse_square_scale,
                       o.label_smoothing, o.reduction, o.softcap, o.logit_scale, o.return_z_loss,
                       o.return_token_accuracy, o.return_predicted_tokens, o.compute_dx, o.compute_dw,
                       o.compute_db, o.accum_dtype, o.chunk_rows, o.use_token_scaling, o.chunk_budget_mib);
}

c10::IValue opt_ivalue(const OptDtype& d) { return d ? c10::IValue(*d) : c10::IValue(); }
c10::IValue opt_ivalue(const OptDouble& d) { return d ? c10::IValue(*d) : c10::IValue(); }

struct FlceFunction : public torch::autograd::Function<FlceFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                               const at::Tensor& target, const Opt& bias, const Opt& ce_weight,
                               const Options& o, T7* result) {
    *result = call_fwd(input, weight, target, bias, ce_weight, o);
    ctx->set_materialize_grads(false);
    const bool has_bias = bias.has_value() && bias->defined();
    ctx->saved_data["has_bias"] = has_bias;
    ctx->saved_data["has_ce_weight"] = ce_weight.has_value() && ce_weight->defined();
    if (o.reduction == "none") {
      ctx->save_for_backward(
          {input, weight, target, value_or_undefined(bias), value_or_undefined(ce_weight)});
      ctx->saved_data["ignore_index"] = o.ignore_index;
      ctx->saved_data["lse_square_scale"] = o.lse_square_scale;
      ctx->saved_data["label_smoothing"] = o.label_smoothing;
      ctx->saved_data["softcap"] = o.softcap;
      ctx->saved_data["logit_scale"] = o.logit_scale;
      ctx->saved_data["accum_dtype"] = opt_ivalue(o.accum_dtype);
      ctx->saved_data["chunk_rows"] = o.chunk_rows;
      ctx->saved_data["use_token_scaling"] = o.use_token_scaling;
      ctx->saved_data["chunk_budget_mib"] = opt_ivalue(o.chunk_budget_mib);
    } else {
      fwdgrad::save_forward_grads(ctx, std::get<4>(*result), std::get<5>(*result), std::get<6>(*result),
                                  o.compute_dx, o.compute_dw, o.compute_db && has_bias);
    }
    ctx->saved_data["per_row"] = o.reduction == "none";
    return {std::get<0>(*result)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(7);  // input, weight, target, bias, ce_weight, options, result
    InputSlots slots;
    const int sx = slots.add(true), sw = slots.add(true);
    slots.add(true);  // target
    const int sb = slots.add(ctx->saved_data["has_bias"].toBool());
    const bool need_x = needs(ctx, sx), need_w = needs(ctx, sw), need_b = needs(ctx, sb);
    if (!grads[0].defined() || !(need_x || need_w || need_b)) return out;
    const at::Tensor g = grad_as(grads[0], at::kFloat);
    at::Tensor dx, dw, db;
    if (ctx->saved_data["per_row"].toBool()) {
      static const auto bwd = find_op<BwdSig>("liger::fused_linear_cross_entropy_bwd");
      const variable_list s = ctx->get_saved_variables();
      const auto opt = [](const at::Tensor& t) { return t.defined() ? Opt(t) : Opt(); };
      const c10::IValue& acc = ctx->saved_data["accum_dtype"];
      const c10::IValue& mib = ctx->saved_data["chunk_budget_mib"];
      const at::AutoDispatchBelowADInplaceOrView below;
      std::tie(dx, dw, db) = bwd.call(
          g, s[0], s[1], s[2], opt(s[3]), opt(s[4]), ctx->saved_data["ignore_index"].toInt(),
          ctx->saved_data["lse_square_scale"].toDouble(), ctx->saved_data["label_smoothing"].toDouble(),
          "none", ctx->saved_data["softcap"].toDouble(), ctx->saved_data["logit_scale"].toDouble(), need_x,
          need_w, need_b, acc.isNone() ? OptDtype() : OptDtype(acc.toScalarType()),
          ctx->saved_data["chunk_rows"].toInt(), ctx->saved_data["use_token_scaling"].toBool(),
          mib.isNone() ? OptDouble() : OptDouble(mib.toDouble()));
    } else {
      auto r = fwdgrad::take_forward_grads(
          ctx, g, {need_x, need_w, need_b}, "fused_linear_cross_entropy_fwd",
          "liger_cpp.ops.fused_linear_cross_entropy",
          "fused_linear_cross_entropy with reduction='mean'/'sum' computes its gradients in the forward and "
          "the first backward scales them in place; a second backward through the same graph "
          "(retain_graph=True) is not supported. Use reduction='none' (its backward recomputes) or run the "
          "forward again.");
      dx = std::move(r[0]);
      dw = std::move(r[1]);
      db = std::move(r[2]);
    }
    if (need_x) out[0] = std::move(dx);
    if (need_w) out[1] = std::move(dw);
    if (need_b) out[3] = std::move(db);
    return once_differentiable(std::move(out), "fused_linear_cross_entropy", {grads[0]});
  }
};

T7 flce_fwd_autograd(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& target,
                     const Opt& bias, const Opt& ce_weight, int64_t ignore_index, double lse_square_scale,
                     double label_smoothing, c10::string_view reduction, double softcap, double logit_scale,
                     bool return_z_loss, bool return_token_accuracy, bool return_predicted_tokens,
                     bool compute_dx, bool compute_dw, bool compute_db, OptDtype accum_dtype,
                     int64_t chunk_rows, bool use_token_scaling, OptDouble chunk_budget_mib) {
  const Options o{ignore_index,
                  lse_square_scale,
                  label_smoothing,
                  std::string(reduction),
                  softcap,
                  logit_scale,
                  return_z_loss,
                  return_token_accuracy,
                  return_predicted_tokens,
                  compute_dx,
                  compute_dw,
                  compute_db,
                  accum_dtype,
                  chunk_rows,
                  use_token_scaling,
                  chunk_budget_mib};
  if (!any_requires_grad(input, weight, bias)) return call_fwd(input, weight, target, bias, ce_weight, o);
  T7 result;
  variable_list loss = FlceFunction::apply(input, weight, target, bias, ce_weight, o, &result);
  std::get<0>(result) = std::move(loss[0]);
  return result;
}

}  // namespace fused_linear_cross_entropy_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace fused_linear_cross_entropy_autograd_impl;  // NOLINT(build/namespaces)
  m.impl("fused_linear_cross_entropy_fwd", &flce_fwd_autograd);
}

}  // namespace liger_cpp
