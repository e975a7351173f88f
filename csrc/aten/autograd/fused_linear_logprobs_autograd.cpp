// Autograd of liger::fused_linear_logprobs_fwd in C++ (the Autograd dispatch key). The log-probs
// and the entropy are differentiable outputs; their gradients arrive only in the backward, which
// reruns the chunk loop (liger::fused_linear_logprobs_bwd) with both folded into each row's
// dlogits. Saved: the inputs (held as nn.Linear holds its input) and, with entropy, the forward's
// row statistics; a second backward just runs it again. The statistics leave the node without
// history. Under tracing the backward op is traced like any other (its fake kernel is in Python).
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "aten/op_handle.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace fused_linear_logprobs_autograd_impl {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Opt = std::optional<at::Tensor>;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using FwdSig = Triple(const at::Tensor&, const at::Tensor&, const at::Tensor&, const Opt&, double, int64_t,
                      bool, int64_t);
using BwdSig = Triple(const Opt&, const Opt&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                      const Opt&, const Opt&, const Opt&, double, int64_t, int64_t, bool, bool, bool);

const c10::TypedOperatorHandle<FwdSig>& fwd_op() {
  static const auto op = find_op<FwdSig>("liger::fused_linear_logprobs_fwd");
  return op;
}
const c10::TypedOperatorHandle<BwdSig>& bwd_op() {
  static const auto op = find_op<BwdSig>("liger::fused_linear_logprobs_bwd");
  return op;
}

constexpr int kNumArgs = 9;  // forward's arguments after ctx, the result pointer included

struct LogprobsFunction : public torch::autograd::Function<LogprobsFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                               const at::Tensor& target, const Opt& bias, double temperature,
                               int64_t ignore_index, bool return_entropy, int64_t chunk_rows,
                               at::Tensor* stats_out) {
    auto [logp, entropy, stats] = [&] {
      const at::AutoDispatchBelowADInplaceOrView below;
      return fwd_op().call(input, weight, target, bias, temperature, ignore_index, return_entropy,
                           chunk_rows);
    }();
    ctx->set_materialize_grads(false);
    const bool has_bias = bias.has_value() && bias->defined();
    ctx->save_for_backward({input, weight, target, has_bias ? *bias : at::Tensor(), stats, entropy});
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["ignore_index"] = ignore_index;
    ctx->saved_data["chunk_rows"] = chunk_rows;
    ctx->saved_data["has_bias"] = has_bias;
    ctx->saved_data["entropy"] = return_entropy;
    *stats_out = stats;
    return {logp, entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(kNumArgs);
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const bool need_x = ctx->needs_input_grad(0), need_w = ctx->needs_input_grad(1);
    const bool need_b = has_bias && ctx->needs_input_grad(3);
    const at::Tensor& g_lp = grads[0];
    const at::Tensor g_ent = ctx->saved_data["entropy"].toBool() ? grads[1] : at::Tensor();
    if (!(need_x || need_w || need_b) || (!g_lp.defined() && !g_ent.defined())) return out;
    const variable_list s = ctx->get_saved_variables();
    const Opt bias = has_bias ? Opt(s[3]) : std::nullopt;
    auto opt = [](const at::Tensor& t) { return t.defined() ? Opt(t) : std::nullopt; };
    auto [dx, dw, db] =
        bwd_op().call(opt(g_lp), opt(g_ent), s[0], s[1], s[2], bias,
                      g_ent.defined() ? Opt(s[4]) : std::nullopt, g_ent.defined() ? Opt(s[5]) : std::nullopt,
                      ctx->saved_data["temperature"].toDouble(), ctx->saved_data["ignore_index"].toInt(),
                      ctx->saved_data["chunk_rows"].toInt(), need_x, need_w, need_b);
    if (need_x) out[0] = dx;
    if (need_w) out[1] = dw;
    if (need_b) out[3] = db;
    return out;
  }
};

Triple logprobs_fwd_autograd(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& target,
                             const Opt& bias, double temperature, int64_t ignore_index, bool return_entropy,
                             int64_t chunk_rows) {
  at::Tensor stats;
  variable_list r = LogprobsFunction::apply(input, weight, target, bias, temperature, ignore_index,
                                            return_entropy, chunk_rows, &stats);
  return {r[0], r[1], stats};
}

}  // namespace fused_linear_logprobs_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace fused_linear_logprobs_autograd_impl;  // NOLINT(build/namespaces)
  m.impl("fused_linear_logprobs_fwd", &logprobs_fwd_autograd);
}

}  // namespace liger_cpp
