// Autograd for liger::rope_fwd and liger::mrope_fwd, in C++ (the Autograd
// dispatch key) rather than through torch.library.register_autograd.
//
// Why C++: the RoPE kernels are so short (B4 T4096 32/8 heads d128 bf16: about
// 90 us per direction on an H200) that the Python around them was the cost of
// fwd+bwd: register_autograd's generated autograd.Function (redispatch,
// fill_defaults, setup_context in Python) on the way in, and on the way back
// the engine's device thread taking the GIL to run a Python backward that then
// calls rope_bwd through the dispatcher. The GPU work was already one launch per
// direction over q and k with the same layout (and vector width) both ways; the
// GPU sat idle between the two launches. Here both directions stay in C++ and
// the backward never touches Python (benchmarks/bench_rope.py reports the kernel
// time next to the wall time so the two can be compared).
//
// Gradients: dq, dk = the transposed rotation of the output gradients (one
// rope_bwd / mrope_bwd call for both). An output whose gradient is absent
// (only q_out or only k_out used) is not materialised as zeros: its operand
// enters the backward kernel with zero heads and its input gets no gradient
// (undefined = zero for autograd). cos and sin get gradients only when they
// require grad (HF's rotary buffers do not), with ATen ops in float32 (float64
// for float64 inputs):
//   dcos = sum over heads of g * x, dsin = sum over heads of g * rotate_half(x),
// reduced to each table's (broadcast) shape; for mRoPE plane p receives the
// columns it supplied.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <vector>

#include "aten/autograd/autograd_common.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace rope_autograd_impl {

using autograd::AutogradContext;
using autograd::find_op;
using autograd::variable_list;
using Pair = std::tuple<at::Tensor, at::Tensor>;
using RopeSig = Pair(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t);
using MropeSig = Pair(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                      c10::IntArrayRef, int64_t);

Pair call_rope(bool backward, const at::Tensor& a, const at::Tensor& b, const at::Tensor& cos,
               const at::Tensor& sin, const std::optional<std::vector<int64_t>>& sections,
               int64_t unsqueeze_dim) {
  // Operator handles looked up once (thread-safe statics), not per call.
  static const auto rope_fwd = find_op<RopeSig>("liger::rope_fwd");
  static const auto rope_bwd = find_op<RopeSig>("liger::rope_bwd");
  static const auto mrope_fwd = find_op<MropeSig>("liger::mrope_fwd");
  static const auto mrope_bwd = find_op<MropeSig>("liger::mrope_bwd");
  if (sections) return (backward ? mrope_bwd : mrope_fwd).call(a, b, cos, sin, *sections, unsqueeze_dim);
  return (backward ? rope_bwd : rope_fwd).call(a, b, cos, sin, unsqueeze_dim);
}

at::Tensor rotate_half(const at::Tensor& x) {
  const c10::SymInt h = x.sym_size(-1) / 2;
  return at::cat({-x.narrow_symint(-1, h, h), x.narrow_symint(-1, 0, h)}, -1);
}

// Gradients of cos and sin (see the file comment); g* undefined = zero.
std::tuple<at::Tensor, at::Tensor> table_grads(const at::Tensor& q, const at::Tensor& k, at::Tensor gq,
                                               at::Tensor gk, const at::Tensor& cos, const at::Tensor& sin,
                                               bool need_cos, bool need_sin, bool heads_first,
                                               const std::optional<std::vector<int64_t>>& sections) {
  const auto acc = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  if (!gq.defined()) gq = at::zeros_like(q);
  if (!gk.defined()) gk = at::zeros_like(k);
  const int64_t hdim = heads_first ? 1 : 2;
  const at::Tensor qf = q.to(acc), kf = k.to(acc), gqf = gq.to(acc), gkf = gk.to(acc);
  const at::Tensor dcos = (gqf * qf).sum(hdim) + (gkf * kf).sum(hdim);  // (B, S, D)
  const at::Tensor dsin = (gqf * rotate_half(qf)).sum(hdim) + (gkf * rotate_half(kf)).sum(hdim);
  auto reduce = [&](at::Tensor g, const at::Tensor& table, bool need) -> at::Tensor {
    if (!need) return {};
    if (sections) {
      // Column j (and j + D/2) belongs to plane 0 below t, 1 below t + h, else 2.
      const c10::SymInt d = g.sym_size(-1);
      const at::Tensor cols = at::arange(c10::Scalar(d), g.options().dtype(at::kLong)).remainder(d / 2);
      const int64_t t = (*sections)[0], th = (*sections)[0] + (*sections)[1];
      const at::Tensor plane = cols.ge(t).to(at::kLong) + cols.ge(th).to(at::kLong);
      g = at::stack({g * plane.eq(0), g * plane.eq(1), g * plane.eq(2)});  // (3, B, S, D)
    }
    // Sum over the dimensions the table was broadcast along ((S, D), (1, S, D), (3, 1, S, D)).
    return at::sum_to(g, table.sym_sizes()).to(table.scalar_type());
  };
  return {reduce(dcos, cos, need_cos), reduce(dsin, sin, need_sin)};
}

// sections: std::nullopt for RoPE, mrope_section for mRoPE.
struct RopeFunction : public torch::autograd::Function<RopeFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& cos, const at::Tensor& sin,
                               std::optional<std::vector<int64_t>> sections, int64_t unsqueeze_dim) {
    const bool mrope = sections.has_value();
    // Function::apply only turns grad mode off: without this guard the call would come back here.
    auto [q_out, k_out] = [&] {
      const at::AutoDispatchBelowADInplaceOrView below;
      return call_rope(/*backward=*/false, q, k, cos, sin, sections, unsqueeze_dim);
    }();
    // Missing output gradients stay undefined (no zero-filled q- or k-sized buffers).
    ctx->set_materialize_grads(false);
    // q and k are kept only for the (rare) gradients of cos and sin.
    const bool keep = cos.requires_grad() || sin.requires_grad();
    ctx->save_for_backward({cos, sin, keep ? q : at::Tensor(), keep ? k : at::Tensor()});
    ctx->saved_data["unsqueeze_dim"] = unsqueeze_dim;
    ctx->saved_data["dtype"] = q.scalar_type();
    if (mrope) ctx->saved_data["sections"] = *sections;
    return {q_out, k_out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &cos = saved[0], &sin = saved[1];
    const int64_t unsqueeze_dim = ctx->saved_data["unsqueeze_dim"].toInt();
    const bool heads_first = unsqueeze_dim == 1 || unsqueeze_dim == -3;
    std::optional<std::vector<int64_t>> sections;
    if (ctx->saved_data.count("sections")) sections = ctx->saved_data["sections"].toIntVector();
    // Output gradients of another floating dtype are cast to the outputs' (q's and k's) dtype.
    const at::Tensor gq = autograd::grad_as(grads[0], ctx->saved_data["dtype"].toScalarType());
    const at::Tensor gk = autograd::grad_as(grads[1], ctx->saved_data["dtype"].toScalarType());
    at::Tensor dq, dk;
    const bool need_q = ctx->needs_input_grad(0) && gq.defined();
    const bool need_k = ctx->needs_input_grad(1) && gk.defined();
    if (need_q || need_k) {
      // An operand without a gradient (or not needing one) rides along with zero heads.
      // Zero heads of the other gradient: same B, S, D, dtype and device, no data.
      const int64_t hdim = heads_first ? 1 : 2;
      const at::Tensor a = need_q ? gq : gk.narrow(hdim, 0, 0);
      const at::Tensor b = need_k ? gk : gq.narrow(hdim, 0, 0);
      const at::AutoDispatchBelowADInplaceOrView below;
      auto [rq, rk] = call_rope(/*backward=*/true, a, b, cos, sin, sections, unsqueeze_dim);
      if (need_q) dq = rq;
      if (need_k) dk = rk;
    }
    at::Tensor dcos, dsin;
    if (ctx->needs_input_grad(2) || ctx->needs_input_grad(3)) {
      std::tie(dcos, dsin) = table_grads(saved[2], saved[3], gq, gk, cos, sin, ctx->needs_input_grad(2),
                                         ctx->needs_input_grad(3), heads_first, sections);
    }
    // One entry per forward argument: q, k, cos, sin, sections, unsqueeze_dim.
    return autograd::once_differentiable({dq, dk, dcos, dsin, at::Tensor(), at::Tensor()}, "rope",
                                         {grads[0], grads[1]});
  }
};

Pair rope_fwd_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin,
                       int64_t unsqueeze_dim) {
  if (!autograd::any_requires_grad(q, k, cos, sin)) {  // no node: nothing can ask for a gradient
    const at::AutoDispatchBelowADInplaceOrView below;
    return call_rope(/*backward=*/false, q, k, cos, sin, std::nullopt, unsqueeze_dim);
  }
  const variable_list r = RopeFunction::apply(q, k, cos, sin, std::nullopt, unsqueeze_dim);
  return {r[0], r[1]};
}

Pair mrope_fwd_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                        const at::Tensor& sin, c10::IntArrayRef mrope_section, int64_t unsqueeze_dim) {
  if (!autograd::any_requires_grad(q, k, cos, sin)) {
    const at::AutoDispatchBelowADInplaceOrView below;
    return call_rope(/*backward=*/false, q, k, cos, sin, mrope_section.vec(), unsqueeze_dim);
  }
  const variable_list r = RopeFunction::apply(q, k, cos, sin, mrope_section.vec(), unsqueeze_dim);
  return {r[0], r[1]};
}

}  // namespace rope_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace rope_autograd_impl;  // NOLINT(build/namespaces)

  m.impl("rope_fwd", &rope_fwd_autograd);
  m.impl("mrope_fwd", &mrope_fwd_autograd);
}

}  // namespace liger_cpp
