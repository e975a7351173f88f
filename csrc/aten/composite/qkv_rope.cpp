// liger::qkv_rope / qkv_rope_bwd: an attention layer's bias-free q / k / v projections with RoPE
// (HF LlamaAttention's q_proj(x).view(...).transpose(1, 2) three times and apply_rotary_pos_emb)
// as one op, registered for both devices. Math: csrc/schema.cpp.
//
// Why one op: at batch 1 a training step is bound by the host. HF's projections cost, per layer,
// three nn.Linear calls (linear, matmul's fold, t, mm, _unsafe_view each), three views and three
// transposes, and in the backward their nodes plus the two adds of x's three gradients; here it is
// one call and one node around the same GEMMs and RoPE kernel. The forward makes nn.Linear's mm
// calls on the same (B S, H) rows and rope_fwd's call on the same strided views, so q, k and v are
// bitwise what HF computes with liger_cpp's RoPE; the backward makes autograd's GEMMs for the
// weight gradients and accumulates dx in two addmm (float32 accumulation, one rounding).
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>

#include "aten/checks/common.h"
#include "aten/checks/projection_checks.h"
#include "aten/op_handle.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles the host files as one unity translation unit.
namespace qkv_rope_impl {

using Pair = std::tuple<at::Tensor, at::Tensor>;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using Opt = std::optional<at::Tensor>;
using RopeSig = Pair(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t);

const c10::TypedOperatorHandle<RopeSig>& rope_op(bool backward) {
  static const auto fwd = find_op<RopeSig>("liger::rope_fwd");
  static const auto bwd = find_op<RopeSig>("liger::rope_bwd");
  return backward ? bwd : fwd;
}

struct Sizes {
  int64_t B, S, H, D, Hq, Hk;
  int64_t M() const { return B * S; }
};

Sizes check_inputs(const at::Tensor& x, const at::Tensor& wq, const at::Tensor& wk, const at::Tensor& wv,
                   const at::Tensor& cos, const at::Tensor& sin, int64_t head_dim) {
  projections::check_input(x);
  LIGER_CHECK_ARG(x.dim() == 3, "x", "expected (batch, sequence, hidden), got shape ", shape_str(x));
  LIGER_CHECK_ARG(head_dim > 0 && head_dim % 2 == 0, "head_dim", "expected a positive even size, got ",
                  head_dim);
  const int64_t H = x.size(2);
  projections::check_weight(wq, "w_q", x, -1, H);
  projections::check_weight(wk, "w_k", x, -1, H);
  projections::check_weight(wv, "w_v", x, wk.size(0), H);
  LIGER_CHECK_ARG(wq.size(0) % head_dim == 0, "w_q", "expected a multiple of head_dim (", head_dim,
                  ") rows, got ", wq.size(0));
  LIGER_CHECK_ARG(wk.size(0) % head_dim == 0, "w_k", "expected a multiple of head_dim (", head_dim,
                  ") rows, got ", wk.size(0));
  LIGER_CHECK_ARG(cos.size(-1) == head_dim, "cos", "expected width head_dim (", head_dim,
                  ": full rotary), got shape ", shape_str(cos));
  LIGER_CHECK_ARG(sin.sizes() == cos.sizes(), "sin", "expected cos' shape ", shape_str(cos), ", got ",
                  shape_str(sin));
  return {x.size(0), x.size(1), H, head_dim, wq.size(0) / head_dim, wk.size(0) / head_dim};
}

// A projection's bias: absent, or (rows,) of x's dtype and device.
at::Tensor check_bias(const Opt& b, const char* name, const at::Tensor& x, int64_t rows) {
  if (!b.has_value() || !b->defined()) return at::Tensor();
  LIGER_CHECK_ARG(b->dim() == 1 && b->size(0) == rows, name, "expected shape (", rows, "), got ",
                  shape_str(*b));
  LIGER_CHECK_ARG(b->scalar_type() == x.scalar_type() && b->device() == x.device(), name,
                  "expected x's dtype and device, got ", dtype_str(b->scalar_type()), " on ", b->device());
  return *b;
}

// x2 W^T (+ b): nn.Linear's call on the rows (at::addmm with a bias, as its flattened path).
at::Tensor project(const at::Tensor& x2, const at::Tensor& w, const at::Tensor& b) {
  return b.defined() ? at::addmm(b, x2, w.t()) : at::mm(x2, w.t());
}

// An (M, heads D) GEMM output seen as HF's view(B, S, heads, D).transpose(1, 2).
at::Tensor heads_view(const at::Tensor& rows2, const Sizes& s, int64_t heads) {
  return rows2.view({s.B, s.S, heads, s.D}).transpose(1, 2);
}

// A (B, heads, S, D) gradient as the (M, heads D) rows of its GEMM: a view when its memory is the
// (B, S, heads, D) layout (the forward's), a copy otherwise (as autograd's view backward makes).
at::Tensor grad_rows(const at::Tensor& g, const Sizes& s, int64_t heads) {
  return g.transpose(1, 2).reshape({s.M(), heads * s.D});
}

Triple fwd(const at::Tensor& x, const at::Tensor& w_q, const at::Tensor& w_k, const at::Tensor& w_v,
           const at::Tensor& cos, const at::Tensor& sin, int64_t head_dim, const Opt& b_q, const Opt& b_k,
           const Opt& b_v) {
  const Sizes s = check_inputs(x, w_q, w_k, w_v, cos, sin, head_dim);
  const at::Tensor bq = check_bias(b_q, "b_q", x, w_q.size(0)), bk = check_bias(b_k, "b_k", x, w_k.size(0));
  const at::Tensor bv = check_bias(b_v, "b_v", x, w_v.size(0));
  const c10::DeviceGuard guard(x.device());
  const at::Tensor x2 = projections::rows(x, s.M(), s.H);
  const at::Tensor q2 = project(x2, w_q, bq);
  const at::Tensor k2 = project(x2, w_k, bk);
  // v is an output: allocated with the strides of HF's view (not a view of an internal buffer).
  at::Tensor v =
      at::empty_strided({s.B, s.Hk, s.S, s.D}, {s.S * s.Hk * s.D, s.D, s.Hk * s.D, 1}, x.options());
  at::Tensor v2 = v.transpose(1, 2).view({s.M(), s.Hk * s.D});
  if (bv.defined())
    at::addmm_out(v2, bv, x2, w_v.t());
  else
    at::mm_out(v2, x2, w_v.t());
  auto [q, k] = rope_op(false).call(heads_view(q2, s, s.Hq), heads_view(k2, s, s.Hk), cos, sin, 1);
  return {q, k, v};
}

Grads bwd(const at::Tensor& dq, const at::Tensor& dk, const at::Tensor& dv, const at::Tensor& x,
          const at::Tensor& w_q, const at::Tensor& w_k, const at::Tensor& w_v, const at::Tensor& cos,
          const at::Tensor& sin, int64_t head_dim, std::array<bool, 7> mask) {
  const Sizes s = check_inputs(x, w_q, w_k, w_v, cos, sin, head_dim);
  const auto check_grad = [&](const at::Tensor& g, const char* name, int64_t heads) {
    LIGER_CHECK_ARG(
        g.dim() == 4 && g.size(0) == s.B && g.size(1) == heads && g.size(2) == s.S && g.size(3) == s.D, name,
        "expected shape (", s.B, ", ", heads, ", ", s.S, ", ", s.D, ") (the forward output's), got ",
        shape_str(g));
    LIGER_CHECK_ARG(g.scalar_type() == x.scalar_type() && g.device() == x.device(), name,
                    "expected x's dtype and device, got ", dtype_str(g.scalar_type()), " on ", g.device());
  };
  check_grad(dq, "dq", s.Hq);
  check_grad(dk, "dk", s.Hk);
  check_grad(dv, "dv", s.Hk);
  const c10::DeviceGuard guard(x.device());
  const auto none = [&] { return at::empty({0}, x.options()); };
  at::Tensor dx = none(), dwq = none(), dwk = none(), dwv = none(), dbq = none(), dbk = none(), dbv = none();
  auto [dq_pre, dk_pre] = rope_op(true).call(dq, dk, cos, sin, 1);
  const at::Tensor gq = grad_rows(dq_pre, s, s.Hq), gk = grad_rows(dk_pre, s, s.Hk),
                   gv = grad_rows(dv, s, s.Hk);
  if (mask[1] || mask[2] || mask[3]) {
    const at::Tensor x2 = projections::rows(x, s.M(), s.H);
    if (mask[1]) dwq = at::mm(gq.t(), x2);
    if (mask[2]) dwk = at::mm(gk.t(), x2);
    if (mask[3]) dwv = at::mm(gv.t(), x2);
  }
  if (mask[0]) {
    dx = at::empty(x.sizes(), x.options());
    at::Tensor dx2 = dx.view({s.M(), s.H});
    at::mm_out(dx2, gq, w_q);
    dx2.addmm_(gk, w_k);
    dx2.addmm_(gv, w_v);
  }
  if (mask[4]) dbq = gq.sum(0);
  if (mask[5]) dbk = gk.sum(0);
  if (mask[6]) dbv = gv.sum(0);
  return {dx, dwq, dwk, dwv, dbq, dbk, dbv};
}

}  // namespace qkv_rope_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  m.impl("qkv_rope", &qkv_rope_impl::fwd);
  m.impl("qkv_rope_bwd", &qkv_rope_impl::bwd);
}

#ifdef LIGER_CPP_WITH_CUDA
TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  m.impl("qkv_rope", &qkv_rope_impl::fwd);
  m.impl("qkv_rope_bwd", &qkv_rope_impl::bwd);
}
#endif

}  // namespace liger_cpp
