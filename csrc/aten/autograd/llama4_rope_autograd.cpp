// Autograd for liger::llama4_rope_fwd in C++ (the Autograd dispatch key), as for RoPE: both
// directions stay in C++ and the backward never enters Python.
//
// Gradients: dq, dk = the rotation by the conjugate frequencies (one llama4_rope_bwd call for both;
// an output without a gradient rides along with zero heads, as in rope_autograd.cpp). freqs gets a
// gradient only when it requires grad (HF's frequencies are buffers and do not), with ATen ops in
// float32 (float64 for float64): for o = x f per pair (a + ib)(c + is),
//   dc = sum over heads of g0 a + g1 b,   ds = sum over heads of g1 a - g0 b,
// reduced to freqs' (broadcast) shape.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <tuple>

#include "aten/op_handle.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace llama4_rope_autograd_impl {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Pair = std::tuple<at::Tensor, at::Tensor>;
using Sig = Pair(const at::Tensor&, const at::Tensor&, const at::Tensor&, bool);

Pair call(bool backward, const at::Tensor& a, const at::Tensor& b, const at::Tensor& freqs,
          bool heads_first) {
  static const auto fwd = find_op<Sig>("liger::llama4_rope_fwd");
  static const auto bwd = find_op<Sig>("liger::llama4_rope_bwd");
  return (backward ? bwd : fwd).call(a, b, freqs, heads_first);
}

// The gradient of freqs from one operand x and its output gradient g (both 4-D, caller's layout).
at::Tensor freqs_grad(const at::Tensor& x, const at::Tensor& g, bool heads_first, at::ScalarType acc) {
  const int64_t hdim = heads_first ? 1 : 2;
  auto pairs = [&](const at::Tensor& t) {
    return t.to(acc).unflatten(-1, {t.size(-1) / 2, 2});  // (..., P, 2)
  };
  const at::Tensor xp = pairs(x), gp = pairs(g);
  const at::Tensor a = xp.select(-1, 0), b = xp.select(-1, 1);
  const at::Tensor g0 = gp.select(-1, 0), g1 = gp.select(-1, 1);
  at::Tensor dc = (g0 * a + g1 * b).sum(hdim);  // (B, S, P)
  at::Tensor ds = (g1 * a - g0 * b).sum(hdim);
  return at::stack({dc, ds}, -1);  // (B, S, P, 2)
}

struct Llama4RopeFunction : public torch::autograd::Function<Llama4RopeFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& freqs, bool heads_first) {
    auto [q_out, k_out] = [&] {
      const at::AutoDispatchBelowADInplaceOrView below;
      return call(/*backward=*/false, q, k, freqs, heads_first);
    }();
    ctx->set_materialize_grads(false);
    const bool keep = freqs.requires_grad();
    ctx->save_for_backward({freqs, keep ? q : at::Tensor(), keep ? k : at::Tensor()});
    ctx->saved_data["heads_first"] = heads_first;
    return {q_out, k_out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& freqs = saved[0];
    const bool heads_first = ctx->saved_data["heads_first"].toBool();
    const at::Tensor &gq = grads[0], &gk = grads[1];
    at::Tensor dq, dk, df;
    const bool need_q = ctx->needs_input_grad(0) && gq.defined();
    const bool need_k = ctx->needs_input_grad(1) && gk.defined();
    if (need_q || need_k) {
      const int64_t hdim = heads_first ? 1 : 2;
      const at::Tensor a = need_q ? gq : gk.narrow(hdim, 0, 0);
      const at::Tensor b = need_k ? gk : gq.narrow(hdim, 0, 0);
      auto [rq, rk] = call(/*backward=*/true, a, b, freqs, heads_first);
      if (need_q) dq = rq;
      if (need_k) dk = rk;
    }
    if (ctx->needs_input_grad(2) && (gq.defined() || gk.defined())) {
      const at::Tensor &q = saved[1], &k = saved[2];
      const auto acc = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
      at::Tensor g = gq.defined() ? freqs_grad(q, gq, heads_first, acc) : at::Tensor();
      if (gk.defined()) {
        const at::Tensor gk_part = freqs_grad(k, gk, heads_first, acc);
        g = g.defined() ? g + gk_part : gk_part;
      }
      df = at::sum_to(g, freqs.sym_sizes()).to(freqs.scalar_type());
    }
    // One entry per forward argument: q, k, freqs, heads_first.
    return {dq, dk, df, at::Tensor()};
  }
};

Pair llama4_rope_fwd_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& freqs,
                              bool heads_first) {
  const variable_list r = Llama4RopeFunction::apply(q, k, freqs, heads_first);
  return {r[0], r[1]};
}

}  // namespace llama4_rope_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace llama4_rope_autograd_impl;  // NOLINT(build/namespaces)
  m.impl("llama4_rope_fwd", &llama4_rope_fwd_autograd);
}

}  // namespace liger_cpp
