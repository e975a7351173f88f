// Autograd for liger::qkv_rope (C++ on the Autograd key: why and the pattern in
// autograd_common.h).
//
// Saved: x, the three weights, cos and sin: what HF's projections and RoPE save between them (the
// rotation's backward needs only cos and sin); with q / k norms also their weights, inputs (the
// projections, q_pre / k_pre, from the internal qkv_rope_fwd) and RSTD, as HF's norms save them. Gradients:
// one qkv_rope_bwd call for those needs_input_grad asks for (a frozen weight costs no GEMM). cos and sin get
// no gradient: an error if they require one (the module path, with liger_cpp's rope op, differentiates them).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>

#include "aten/autograd/autograd_common.h"
#include "aten/checks/common.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace qkv_rope_autograd_impl {

using namespace autograd;  // NOLINT(build/namespaces)
using T = const at::Tensor&;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using Seven = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using Opt = std::optional<at::Tensor>;
using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                         at::Tensor, at::Tensor>;
using Str = c10::string_view;
using FwdSig = Triple(T, T, T, T, T, T, int64_t, const Opt&, const Opt&, const Opt&, const Opt&, const Opt&,
                      double, double, Str);
using FwdSavedSig = Seven(T, T, T, T, T, T, int64_t, const Opt&, const Opt&, const Opt&, T, T, double, double,
                          Str);
using BwdSig = Grads(T, T, T, T, T, T, T, T, T, int64_t, std::array<bool, 9>, const Opt&, const Opt&,
                     const Opt&, const Opt&, const Opt&, const Opt&, double, Str);

bool given(const Opt& t) { return t.has_value() && t->defined(); }

Triple fwd_below(T x, T wq, T wk, T wv, T cos, T sin, int64_t head_dim, const Opt& bq, const Opt& bk,
                 const Opt& bv, const Opt& nq, const Opt& nk, double eps, double offset, Str casting) {
  static const auto op = find_op<FwdSig>("liger::qkv_rope");
  const at::AutoDispatchBelowADInplaceOrView below;
  return op.call(x, wq, wk, wv, cos, sin, head_dim, bq, bk, bv, nq, nk, eps, offset, casting);
}

struct QkvRopeFunction : public torch::autograd::Function<QkvRopeFunction> {
  static variable_list forward(AutogradContext* ctx, T x, T wq, T wk, T wv, T cos, T sin, int64_t head_dim,
                               const Opt& bq, const Opt& bk, const Opt& bv, const Opt& nq, const Opt& nk,
                               double eps, double offset, Str casting) {
    at::Tensor q, k, v;
    if (given(nq) && given(nk)) {  // the norms' inputs and RSTD are saved (what HF's norms save)
      static const auto op = find_op<FwdSavedSig>("liger::qkv_rope_fwd");
      Seven o;
      {
        const at::AutoDispatchBelowADInplaceOrView below;
        o = op.call(x, wq, wk, wv, cos, sin, head_dim, bq, bk, bv, *nq, *nk, eps, offset, casting);
      }
      auto& [q_, k_, v_, q_pre, k_pre, rstd_q, rstd_k] = o;
      q = q_, k = k_, v = v_;
      ctx->save_for_backward({x, wq, wk, wv, cos, sin, q_pre, k_pre, *nq, *nk, rstd_q, rstd_k});
      ctx->saved_data["offset"] = offset;
      ctx->saved_data["casting"] = std::string(casting);
    } else {
      std::tie(q, k, v) =
          fwd_below(x, wq, wk, wv, cos, sin, head_dim, bq, bk, bv, nq, nk, eps, offset, casting);
      ctx->save_for_backward({x, wq, wk, wv, cos, sin});
    }
    ctx->set_materialize_grads(false);
    ctx->saved_data["head_dim"] = head_dim;
    // which optional tensors were given (each takes a needs_input_grad slot only then)
    ctx->saved_data["given"] = int64_t((given(bq) ? 1 : 0) | (given(bk) ? 2 : 0) | (given(bv) ? 4 : 0) |
                                       (given(nq) ? 8 : 0) | (given(nk) ? 16 : 0));
    return {q, k, v};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bwd = find_op<BwdSig>("liger::qkv_rope_bwd");
    // x, w_q, w_k, w_v, cos, sin, head_dim, b_q, b_k, b_v, n_q, n_k, norm_eps, norm_offset, norm_casting
    variable_list out(15);
    const int64_t given_mask = ctx->saved_data["given"].toInt();
    InputSlots slots;
    std::array<int, 11> slot{};
    for (int i = 0; i < 6; ++i) slot[i] = slots.add(true);  // x, w_q, w_k, w_v, cos, sin
    for (int i = 0; i < 5; ++i) slot[6 + i] = slots.add((given_mask >> i) & 1);
    const std::array<bool, 9> mask{needs(ctx, slot[0]), needs(ctx, slot[1]), needs(ctx, slot[2]),
                                   needs(ctx, slot[3]), needs(ctx, slot[6]), needs(ctx, slot[7]),
                                   needs(ctx, slot[8]), needs(ctx, slot[9]), needs(ctx, slot[10])};
    bool any = false;
    for (bool m : mask) any = any || m;
    if (!(grads[0].defined() || grads[1].defined() || grads[2].defined()) || !any) return out;
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const int64_t head_dim = ctx->saved_data["head_dim"].toInt();
    // An output nobody used has no gradient (set_materialize_grads(false)): zeros of its shape then.
    const auto grad = [&](int i, int64_t rows) {
      if (grads[i].defined()) return grad_as(grads[i], x.scalar_type());
      return at::zeros({x.size(0), rows / head_dim, x.size(1), head_dim}, x.options());
    };
    const at::Tensor dq = grad(0, saved[1].size(0)), dk = grad(1, saved[2].size(0)),
                     dv = grad(2, saved[3].size(0));
    const bool norms = saved.size() > 6;
    const auto opt = [&](size_t i) { return norms ? Opt(saved[i]) : Opt(); };
    const double offset = norms ? ctx->saved_data["offset"].toDouble() : 0.0;
    const std::string casting = norms ? ctx->saved_data["casting"].toStringRef() : std::string("llama");
    Grads g;
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      g = bwd.call(dq, dk, dv, x, saved[1], saved[2], saved[3], saved[4], saved[5], head_dim, mask, opt(6),
                   opt(7), opt(8), opt(9), opt(10), opt(11), offset, casting);
    }
    auto& [dx, dwq, dwk, dwv, dbq, dbk, dbv, dnq, dnk] = g;
    if (mask[0]) out[0] = std::move(dx);
    if (mask[1]) out[1] = std::move(dwq);
    if (mask[2]) out[2] = std::move(dwk);
    if (mask[3]) out[3] = std::move(dwv);
    if (mask[4]) out[7] = std::move(dbq);
    if (mask[5]) out[8] = std::move(dbk);
    if (mask[6]) out[9] = std::move(dbv);
    if (mask[7]) out[10] = std::move(dnq);
    if (mask[8]) out[11] = std::move(dnk);
    return once_differentiable(std::move(out), "qkv_rope", {grads[0], grads[1], grads[2]});
  }
};

Triple qkv_rope_autograd(T x, T wq, T wk, T wv, T cos, T sin, int64_t head_dim, const Opt& bq, const Opt& bk,
                         const Opt& bv, const Opt& nq, const Opt& nk, double eps, double offset,
                         Str casting) {
  LIGER_CHECK_ARG(!(at::GradMode::is_enabled() && (requires_grad(cos) || requires_grad(sin))), "cos",
                  "qkv_rope gives cos and sin no gradient: pass them without requires_grad (liger_cpp's rope "
                  "op differentiates them)");
  if (!any_requires_grad(x, wq, wk, wv, bq, bk, bv, nq, nk))
    return fwd_below(x, wq, wk, wv, cos, sin, head_dim, bq, bk, bv, nq, nk, eps, offset, casting);
  variable_list o =
      QkvRopeFunction::apply(x, wq, wk, wv, cos, sin, head_dim, bq, bk, bv, nq, nk, eps, offset, casting);
  return {std::move(o[0]), std::move(o[1]), std::move(o[2])};
}

}  // namespace qkv_rope_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace qkv_rope_autograd_impl;  // NOLINT(build/namespaces)
  m.impl("qkv_rope", &qkv_rope_autograd);
}

}  // namespace liger_cpp
