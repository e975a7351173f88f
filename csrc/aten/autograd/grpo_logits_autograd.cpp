// Autograd of liger::grpo_logits_fwd in C++ (the Autograd dispatch key). The loss (reduce) or the
// per-token loss (reduce=False) is differentiable w.r.t. the logits only; KL and clipping leave
// without history, as in Liger. The backward is liger::grpo_logits_bwd (a new dlogits tensor) or,
// with inplace in eager mode on contiguous logits, liger::grpo_logits_bwd_, which writes dlogits over
// the saved logits and bumps their version (Liger's inplace=True: a later use of those logits by
// another node's backward then raises instead of reading the gradient).
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>

#include "aten/autograd/autograd_common.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace grpo_logits_autograd_impl {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Opt = std::optional<at::Tensor>;
using Six = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using sv = c10::string_view;
using FwdSig = Six(const at::Tensor&, const at::Tensor&, const at::Tensor&, const Opt&, const Opt&,
                   const Opt&, const Opt&, const Opt&, const Opt&, sv, sv, double, double, double,
                   std::optional<double>, double, std::optional<int64_t>, bool, double, double, double,
                   double, double, double, bool, bool);
#define LIGER_GRPO_BWD_SIG(RET)                                                                          \
  RET(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,     \
      const at::Tensor&, const at::Tensor&, const Opt&, const Opt&, const Opt&, const Opt&, const Opt&,  \
      const Opt&, sv, sv, double, double, double, std::optional<double>, double, std::optional<int64_t>, \
      bool, double, double, double, double, double, double, bool)
using BwdSig = LIGER_GRPO_BWD_SIG(at::Tensor);
using BwdInplaceSig = LIGER_GRPO_BWD_SIG(void);
#undef LIGER_GRPO_BWD_SIG

const c10::TypedOperatorHandle<FwdSig>& fwd_op() {
  static const auto op = find_op<FwdSig>("liger::grpo_logits_fwd");
  return op;
}
const c10::TypedOperatorHandle<BwdSig>& bwd_op() {
  static const auto op = find_op<BwdSig>("liger::grpo_logits_bwd");
  return op;
}
const c10::TypedOperatorHandle<BwdInplaceSig>& bwd_inplace_op() {
  static const auto op = find_op<BwdInplaceSig>("liger::grpo_logits_bwd_");
  return op;
}

// The forward's options, kept for the backward.
struct Options {
  std::string loss_type, level;
  double beta, eps_low, eps_high;
  std::optional<double> delta;
  double temperature;
  std::optional<int64_t> max_len;
  bool bias_kl;
  double sapo_pos, sapo_neg, vk_pos, vl_pos, vk_neg, vl_neg;
  bool reduce, inplace;
};

constexpr int kNumArgs = 11;  // forward's arguments after ctx: 9 tensors, the options, the outputs

struct GrpoLogitsFunction : public torch::autograd::Function<GrpoLogitsFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& ids,
                               const at::Tensor& adv, const Opt& mask, const Opt& old, const Opt& ref,
                               const Opt& vllm, const Opt& phi, const Opt& normalizer, const Options& o,
                               Six* out) {
    Six r = [&] {
      const at::AutoDispatchBelowADInplaceOrView below;
      return fwd_op().call(logits, ids, adv, mask, old, ref, vllm, phi, normalizer, o.loss_type, o.level,
                           o.beta, o.eps_low, o.eps_high, o.delta, o.temperature, o.max_len, o.bias_kl,
                           o.sapo_pos, o.sapo_neg, o.vk_pos, o.vl_pos, o.vk_neg, o.vl_neg, o.reduce,
                           o.inplace);
    }();
    ctx->set_materialize_grads(false);
    auto val = [](const Opt& t) { return t.has_value() ? *t : at::Tensor(); };
    ctx->save_for_backward({logits, ids, adv, std::get<3>(r), std::get<4>(r), std::get<5>(r), val(mask),
                            val(old), val(ref), val(vllm), val(phi), val(normalizer)});
    ctx->saved_data["loss_type"] = o.loss_type;
    ctx->saved_data["level"] = o.level;
    ctx->saved_data["beta"] = o.beta;
    ctx->saved_data["eps_low"] = o.eps_low;
    ctx->saved_data["eps_high"] = o.eps_high;
    ctx->saved_data["has_delta"] = o.delta.has_value();
    ctx->saved_data["delta"] = o.delta.value_or(0.0);
    ctx->saved_data["temperature"] = o.temperature;
    ctx->saved_data["has_max_len"] = o.max_len.has_value();
    ctx->saved_data["max_len"] = o.max_len.value_or(0);
    ctx->saved_data["bias_kl"] = o.bias_kl;
    ctx->saved_data["sapo_pos"] = o.sapo_pos;
    ctx->saved_data["sapo_neg"] = o.sapo_neg;
    ctx->saved_data["vk_pos"] = o.vk_pos;
    ctx->saved_data["vl_pos"] = o.vl_pos;
    ctx->saved_data["vk_neg"] = o.vk_neg;
    ctx->saved_data["vl_neg"] = o.vl_neg;
    ctx->saved_data["reduce"] = o.reduce;
    ctx->saved_data["inplace"] = o.inplace;
    *out = r;
    return {std::get<0>(r)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(kNumArgs);
    if (!ctx->needs_input_grad(0) || !grads[0].defined()) return out;
    const variable_list s = ctx->get_saved_variables();
    auto opt = [](const at::Tensor& t) { return t.defined() ? Opt(t) : std::nullopt; };
    auto& d = ctx->saved_data;
    const std::string loss_type = d["loss_type"].toStringRef(), level = d["level"].toStringRef();
    const std::optional<double> delta =
        d["has_delta"].toBool() ? std::optional<double>(d["delta"].toDouble()) : std::nullopt;
    const std::optional<int64_t> max_len =
        d["has_max_len"].toBool() ? std::optional<int64_t>(d["max_len"].toInt()) : std::nullopt;
    const at::Tensor& logits = s[0];
    // In place only in eager mode (never while tracing) and on logits that are one matrix of rows.
    const bool inplace = d["inplace"].toBool() && logits.is_contiguous() && !autograd::tracing(logits);
    auto call = [&](const auto& op) {
      return op.call(grads[0], logits, s[1], s[2], s[3], s[4], s[5], opt(s[6]), opt(s[7]), opt(s[8]),
                     opt(s[9]), opt(s[10]), opt(s[11]), loss_type, level, d["beta"].toDouble(),
                     d["eps_low"].toDouble(), d["eps_high"].toDouble(), delta, d["temperature"].toDouble(),
                     max_len, d["bias_kl"].toBool(), d["sapo_pos"].toDouble(), d["sapo_neg"].toDouble(),
                     d["vk_pos"].toDouble(), d["vl_pos"].toDouble(), d["vk_neg"].toDouble(),
                     d["vl_neg"].toDouble(), d["reduce"].toBool());
    };
    if (inplace) {
      call(bwd_inplace_op());
      out[0] = logits.detach();  // the gradient, in the logits' storage (Liger returns logits.data)
    } else {
      out[0] = call(bwd_op());
    }
    return autograd::once_differentiable(std::move(out), "grpo_logits");
  }
};

Six grpo_logits_fwd_autograd(const at::Tensor& logits, const at::Tensor& ids, const at::Tensor& adv,
                             const Opt& mask, const Opt& old, const Opt& ref, const Opt& vllm, const Opt& phi,
                             const Opt& normalizer, sv loss_type, sv level, double beta, double eps_low,
                             double eps_high, std::optional<double> delta, double temperature,
                             std::optional<int64_t> max_len, bool bias_kl, double sapo_pos, double sapo_neg,
                             double vk_pos, double vl_pos, double vk_neg, double vl_neg, bool reduce,
                             bool inplace) {
  if (!autograd::any_requires_grad(logits)) {
    const at::AutoDispatchBelowADInplaceOrView below;
    return fwd_op().call(logits, ids, adv, mask, old, ref, vllm, phi, normalizer, loss_type, level, beta,
                         eps_low, eps_high, delta, temperature, max_len, bias_kl, sapo_pos, sapo_neg, vk_pos,
                         vl_pos, vk_neg, vl_neg, reduce, inplace);
  }
  const Options o{std::string(loss_type),
                  std::string(level),
                  beta,
                  eps_low,
                  eps_high,
                  delta,
                  temperature,
                  max_len,
                  bias_kl,
                  sapo_pos,
                  sapo_neg,
                  vk_pos,
                  vl_pos,
                  vk_neg,
                  vl_neg,
                  reduce,
                  inplace};
  Six r;
  // Only the logits get a gradient: every other tensor enters without history.
  auto det = [](const Opt& t) { return t.has_value() && t->defined() ? Opt(t->detach()) : std::nullopt; };
  variable_list loss = GrpoLogitsFunction::apply(logits, ids, adv.detach(), det(mask), det(old), det(ref),
                                                 det(vllm), det(phi), det(normalizer), o, &r);
  std::get<0>(r) = loss[0];
  return r;
}

}  // namespace grpo_logits_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace grpo_logits_autograd_impl;  // NOLINT(build/namespaces)
  m.impl("grpo_logits_fwd", &grpo_logits_fwd_autograd);
}

}  // namespace liger_cpp
