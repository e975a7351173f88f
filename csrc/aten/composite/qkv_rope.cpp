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
using Seven = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                         at::Tensor, at::Tensor>;
using Opt = std::optional<at::Tensor>;
using RopeSig = Pair(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t);
using NormFwdSig = Pair(const at::Tensor&, const Opt&, double, double, c10::string_view, bool);
using NormBwdSig = at::Tensor(at::Tensor&, const at::Tensor&, const Opt&, const at::Tensor&, double,
                              c10::string_view, bool);

const c10::TypedOperatorHandle<RopeSig>& rope_op(bool backward) {
  static const auto fwd = find_op<RopeSig>("liger::rope_fwd");
  static const auto bwd = find_op<RopeSig>("liger::rope_bwd");
  return backward ? bwd : fwd;
}

// The q / k norms are liger_cpp's RMSNorm op (the call LigerRMSNorm makes, on the same rows), its
// backward the in-place form: dX into the gradient rows this op owns.
const c10::TypedOperatorHandle<NormFwdSig>& norm_fwd_op() {
  static const auto op = find_op<NormFwdSig>("liger::rms_norm_fwd");
  return op;
}
const c10::TypedOperatorHandle<NormBwdSig>& norm_bwd_op() {
  static const auto op = find_op<NormBwdSig>("liger::rms_norm_bwd_");
  return op;
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

// The q / k norms: both or neither; weights (D,) (per head) or (heads D,) (the whole projection),
// x's dtype and device (so that the normalised rows keep x's dtype in every casting mode).
bool check_norms(const Opt& n_q, const Opt& n_k, const at::Tensor& x, const Sizes& s) {
  const bool has_q = n_q.has_value() && n_q->defined(), has_k = n_k.has_value() && n_k->defined();
  LIGER_CHECK_ARG(has_q == has_k, "n_k", "expected a k norm weight exactly when n_q is given");
  if (!has_q) return false;
  const auto check = [&](const at::Tensor& n, const char* name, int64_t heads) {
    LIGER_CHECK_ARG(n.dim() == 1 && (n.size(0) == s.D || n.size(0) == heads * s.D), name, "expected shape (",
                    s.D, ",) (per head) or (", heads * s.D, ",) (the whole projection), got ", shape_str(n));
    LIGER_CHECK_ARG(n.scalar_type() == x.scalar_type() && n.device() == x.device(), name,
                    "expected x's dtype and device, got ", dtype_str(n.scalar_type()), " on ", n.device());
  };
  check(*n_q, "n_q", s.Hq);
  check(*n_k, "n_k", s.Hk);
  return true;
}

// A projection's (M, heads D) rows as the norm's rows: (M heads, D) per head, else unchanged.
at::Tensor norm_rows(const at::Tensor& rows2, const at::Tensor& n, const Sizes& s) {
  return n.size(0) == s.D ? rows2.view({-1, s.D}) : rows2;
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

Seven fwd_full(const at::Tensor& x, const at::Tensor& w_q, const at::Tensor& w_k, const at::Tensor& w_v,
               const at::Tensor& cos, const at::Tensor& sin, int64_t head_dim, const Opt& b_q, const Opt& b_k,
               const Opt& b_v, const Opt& n_q, const Opt& n_k, double norm_eps, double norm_offset,
               c10::string_view norm_casting) {
  const Sizes s = check_inputs(x, w_q, w_k, w_v, cos, sin, head_dim);
  const at::Tensor bq = check_bias(b_q, "b_q", x, w_q.size(0)), bk = check_bias(b_k, "b_k", x, w_k.size(0));
  const at::Tensor bv = check_bias(b_v, "b_v", x, w_v.size(0));
  const bool norms = check_norms(n_q, n_k, x, s);
  const c10::DeviceGuard guard(x.device());
  const at::Tensor x2 = projections::rows(x, s.M(), s.H);
  const at::Tensor q_pre = project(x2, w_q, bq);
  const at::Tensor k_pre = project(x2, w_k, bk);
  at::Tensor q2 = q_pre, k2 = k_pre, rstd_q, rstd_k;
  if (norms) {
    at::Tensor yq, yk;
    std::tie(yq, rstd_q) =
        norm_fwd_op().call(norm_rows(q_pre, *n_q, s), *n_q, norm_eps, norm_offset, norm_casting, false);
    std::tie(yk, rstd_k) =
        norm_fwd_op().call(norm_rows(k_pre, *n_k, s), *n_k, norm_eps, norm_offset, norm_casting, false);
    q2 = yq.view({s.M(), s.Hq * s.D});
    k2 = yk.view({s.M(), s.Hk * s.D});
  }
  // v is an output: allocated with the strides of HF's view (not a view of an internal buffer).
  at::Tensor v =
      at::empty_strided({s.B, s.Hk, s.S, s.D}, {s.S * s.Hk * s.D, s.D, s.Hk * s.D, 1}, x.options());
  at::Tensor v2 = v.transpose(1, 2).view({s.M(), s.Hk * s.D});
  if (bv.defined())
    at::addmm_out(v2, bv, x2, w_v.t());
  else
    at::mm_out(v2, x2, w_v.t());
  auto [q, k] = rope_op(false).call(heads_view(q2, s, s.Hq), heads_view(k2, s, s.Hk), cos, sin, 1);
  if (!norms) return {q, k, v, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  return {q, k, v, q_pre, k_pre, rstd_q, rstd_k};
}

Triple fwd(const at::Tensor& x, const at::Tensor& w_q, const at::Tensor& w_k, const at::Tensor& w_v,
           const at::Tensor& cos, const at::Tensor& sin, int64_t head_dim, const Opt& b_q, const Opt& b_k,
           const Opt& b_v, const Opt& n_q, const Opt& n_k, double norm_eps, double norm_offset,
           c10::string_view norm_casting) {
  auto out = fwd_full(x, w_q, w_k, w_v, cos, sin, head_dim, b_q, b_k, b_v, n_q, n_k, norm_eps, norm_offset,
                      norm_casting);
  return {std::get<0>(out), std::get<1>(out), std::get<2>(out)};
}

// The internal forward with norms (the autograd node's): the saved intermediates too.
Seven fwd_saved(const at::Tensor& x, const at::Tensor& w_q, const at::Tensor& w_k, const at::Tensor& w_v,
                const at::Tensor& cos, const at::Tensor& sin, int64_t head_dim, const Opt& b_q,
                const Opt& b_k, const Opt& b_v, const at::Tensor& n_q, const at::Tensor& n_k, double norm_eps,
                double norm_offset, c10::string_view norm_casting) {
  return fwd_full(x, w_q, w_k, w_v, cos, sin, head_dim, b_q, b_k, b_v, n_q, n_k, norm_eps, norm_offset,
                  norm_casting);
}

Grads bwd(const at::Tensor& dq, const at::Tensor& dk, const at::Tensor& dv, const at::Tensor& x,
          const at::Tensor& w_q, const at::Tensor& w_k, const at::Tensor& w_v, const at::Tensor& cos,
          const at::Tensor& sin, int64_t head_dim, std::array<bool, 9> mask, const Opt& q_pre,
          const Opt& k_pre, const Opt& n_q, const Opt& n_k, const Opt& rstd_q, const Opt& rstd_k,
          double norm_offset, c10::string_view norm_casting) {
  const Sizes s = check_inputs(x, w_q, w_k, w_v, cos, sin, head_dim);
  const bool norms = check_norms(n_q, n_k, x, s);
  if (norms) {  // the forward's intermediates, as qkv_rope_fwd returned them
    const auto check_saved = [&](const Opt& t, const char* name, at::IntArrayRef shape, at::ScalarType dt) {
      LIGER_CHECK_ARG(t.has_value() && t->defined() && t->sizes() == shape && t->scalar_type() == dt &&
                          t->device() == x.device() && t->is_contiguous(),
                      name, "expected qkv_rope_fwd's (contiguous, shape ", shape, ", ", dtype_str(dt),
                      "), got ", t.has_value() && t->defined() ? shape_str(*t) : std::string("None"));
    };
    check_saved(q_pre, "q_pre", {s.M(), s.Hq * s.D}, x.scalar_type());
    check_saved(k_pre, "k_pre", {s.M(), s.Hk * s.D}, x.scalar_type());
    const at::ScalarType acc = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;  // rms_norm_fwd's
    check_saved(rstd_q, "rstd_q", {n_q->size(0) == s.D ? s.M() * s.Hq : s.M()}, acc);
    check_saved(rstd_k, "rstd_k", {n_k->size(0) == s.D ? s.M() * s.Hk : s.M()}, acc);
  } else {
    LIGER_CHECK_ARG(!mask[7] && !mask[8], "output_mask", "asks for dn_q / dn_k without n_q, n_k");
  }
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
  at::Tensor dx = none(), dwq = none(), dwk = none(), dwv = none(), dbq = none(), dbk = none(), dbv = none(),
             dnq = none(), dnk = none();
  auto [dq_pre, dk_pre] = rope_op(true).call(dq, dk, cos, sin, 1);
  at::Tensor gq = grad_rows(dq_pre, s, s.Hq), gk = grad_rows(dk_pre, s, s.Hk);
  const at::Tensor gv = grad_rows(dv, s, s.Hk);
  if (norms) {  // through the norms, in place: gq / gk are this call's own rows (rope_bwd's output)
    gq = gq.contiguous();
    gk = gk.contiguous();
    at::Tensor rq = norm_rows(gq, *n_q, s), rk = norm_rows(gk, *n_k, s);
    const at::Tensor wq_n =
        norm_bwd_op().call(rq, norm_rows(*q_pre, *n_q, s), *n_q, *rstd_q, norm_offset, norm_casting, mask[7]);
    const at::Tensor wk_n =
        norm_bwd_op().call(rk, norm_rows(*k_pre, *n_k, s), *n_k, *rstd_k, norm_offset, norm_casting, mask[8]);
    if (mask[7]) dnq = wq_n;
    if (mask[8]) dnk = wk_n;
  }
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
  return {dx, dwq, dwk, dwv, dbq, dbk, dbv, dnq, dnk};
}

}  // namespace qkv_rope_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  m.impl("qkv_rope", &qkv_rope_impl::fwd);
  m.impl("qkv_rope_fwd", &qkv_rope_impl::fwd_saved);
  m.impl("qkv_rope_bwd", &qkv_rope_impl::bwd);
}

#ifdef LIGER_CPP_WITH_CUDA
TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  m.impl("qkv_rope", &qkv_rope_impl::fwd);
  m.impl("qkv_rope_fwd", &qkv_rope_impl::fwd_saved);
  m.impl("qkv_rope_bwd", &qkv_rope_impl::bwd);
}
#endif

}  // namespace liger_cpp
