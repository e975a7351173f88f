// Argument checks and the common (B, H, S, D) view of a RoPE / mRoPE problem,
// shared by the CPU and CUDA ops (and by their forward and backward).
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "aten/checks/common.h"

namespace liger_cpp {

// One RoPE or mRoPE application. q, k (or the gradients dq_out, dk_out in the
// backward) are viewed as [b][head][s][d] with a unit last stride; cos and sin
// as [plane][b][s][d] (planes: 1 for RoPE, 3 for mRoPE; the batch dimension is
// 1 when one table is broadcast over the batch). Outputs are allocated with
// the inputs' layout and returned in the caller's order of dimensions.
struct RopeProblem {
  at::Tensor q, k;              // (B, Hq, S, D), (B, Hk, S, D) views of the inputs
  at::Tensor q_out, k_out;      // the outputs as returned (the caller's dimension order)
  at::Tensor q_out_v, k_out_v;  // their (B, H, S, D) views
  at::Tensor cos, sin;          // (P, B or 1, S, D) views
  int64_t batch = 0, seq = 0, head_dim = 0;
  int64_t section0 = 0, section1 = 0;  // columns [0, s0) plane 0, [s0, s0 + s1) plane 1, rest plane 2
};

// Stride of dimension d for the kernels: 0 when the dimension has one element
// (so that any stride the caller happened to have there cannot block vectorisation).
inline int64_t rope_stride(const at::Tensor& t, int64_t d) { return t.size(d) == 1 ? 0 : t.stride(d); }

namespace detail {

inline std::string sections_str(c10::IntArrayRef s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// cos or sin: RoPE (S, D), (1, S, D) or (B, S, D); mRoPE (3, B, S, D) or
// (3, 1, S, D); float32 or q's dtype; returned as a (P, B or 1, S, D) view
// with a unit last stride (a copy only when the last stride is not 1).
inline at::Tensor rope_table(const at::Tensor& t, const char* name, const at::Tensor& q, int64_t B, int64_t S,
                             int64_t D, bool mrope) {
  LIGER_CHECK_ARG(t.device() == q.device(), name, "expected device ", q.device(), " (q's), got ", t.device());
  const auto dt = t.scalar_type();
  LIGER_CHECK_ARG(dt == at::kFloat || dt == q.scalar_type(), name, "expected float32 or q's dtype (",
                  q.scalar_type(), "), got ", dt);
  at::Tensor v;
  if (mrope) {
    LIGER_CHECK_ARG(t.dim() == 4 && t.size(0) == 3, name, "expected shape (3, B, S, D) for mRoPE, got ",
                    shape_str(t));
    v = t;
  } else {
    LIGER_CHECK_ARG(t.dim() == 2 || t.dim() == 3, name, "expected shape (S, D), (1, S, D) or (B, S, D), got ",
                    shape_str(t));
    v = t.dim() == 2 ? t.unsqueeze(0).unsqueeze(0) : t.unsqueeze(0);
  }
  LIGER_CHECK_ARG(v.size(3) == D, name, "expected the head dim D = ", D,
                  " of q in the last dimension, got shape ", shape_str(t));
  LIGER_CHECK_ARG(v.size(2) == S, name, "expected the sequence length S = ", S, " of q, got shape ",
                  shape_str(t));
  LIGER_CHECK_ARG(v.size(1) == 1 || v.size(1) == B, name, "expected batch 1 or B = ", B, " (q's), got shape ",
                  shape_str(t));
  return v.stride(3) == 1 ? v : v.contiguous();
}

// q or k (or a gradient), 4-D, with a unit last stride (a copy only when the
// last stride is not 1), in the caller's order of dimensions.
inline at::Tensor rope_operand(const at::Tensor& t, const char* name, bool heads_first) {
  LIGER_CHECK_ARG(t.dim() == 4, name, "expected a 4-D tensor ",
                  heads_first ? "(B, H, S, D) (unsqueeze_dim=1)" : "(B, S, H, D) (unsqueeze_dim=2)",
                  ", got shape ", shape_str(t));
  return t.stride(3) == 1 ? t : t.contiguous();
}

}  // namespace detail

// Checks every argument and builds the problem (outputs allocated).
// q_name / k_name: "q", "k" in the forward, "dq_out", "dk_out" in the backward.
// sections: mRoPE's mrope_section (t, h, w), or nullptr for RoPE.
inline RopeProblem prepare_rope(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& cos,
                                const at::Tensor& sin, int64_t unsqueeze_dim,
                                const c10::IntArrayRef* sections, bool cuda, const char* q_name,
                                const char* k_name) {
  const bool allow_double = !cuda;
  LIGER_CHECK_ARG(unsqueeze_dim == 1 || unsqueeze_dim == 2 || unsqueeze_dim == -3 || unsqueeze_dim == -2,
                  "unsqueeze_dim", "expected 1 (q, k of shape (B, H, S, D)) or 2 ((B, S, H, D)), got ",
                  unsqueeze_dim);
  const bool heads_first = unsqueeze_dim == 1 || unsqueeze_dim == -3;
  LIGER_CHECK_ARG(is_float_type(q_in.scalar_type(), allow_double), q_name,
                  "expected float32, float16 or bfloat16", allow_double ? " (or float64 on CPU)" : "",
                  ", got ", q_in.scalar_type());
  LIGER_CHECK_ARG(k_in.scalar_type() == q_in.scalar_type(), k_name, "expected ", q_name, "'s dtype (",
                  q_in.scalar_type(), "), got ", k_in.scalar_type());
  LIGER_CHECK_ARG(k_in.device() == q_in.device(), k_name, "expected device ", q_in.device(), " (", q_name,
                  "'s), got ", k_in.device());
  RopeProblem p;
  const at::Tensor q_src = detail::rope_operand(q_in, q_name, heads_first);
  const at::Tensor k_src = detail::rope_operand(k_in, k_name, heads_first);
  p.q = heads_first ? q_src : q_src.transpose(1, 2);
  p.k = heads_first ? k_src : k_src.transpose(1, 2);
  p.batch = p.q.size(0);
  p.seq = p.q.size(2);
  p.head_dim = p.q.size(3);
  LIGER_CHECK_ARG(
      p.head_dim > 0 && p.head_dim % 2 == 0, q_name,
      "expected an even, positive head dim D (rotate-half pairs column j with j + D/2), got shape ",
      shape_str(q_in));
  LIGER_CHECK_ARG(p.k.size(3) == p.head_dim, k_name, "expected the head dim D = ", p.head_dim, " of ", q_name,
                  ", got shape ", shape_str(k_in));
  LIGER_CHECK_ARG(p.k.size(0) == p.batch && p.k.size(2) == p.seq, k_name, "expected batch ", p.batch,
                  " and sequence length ", p.seq, " of ", q_name, ", got shape ", shape_str(k_in));
  const bool mrope = sections != nullptr;
  p.cos = detail::rope_table(cos, "cos", q_in, p.batch, p.seq, p.head_dim, mrope);
  p.sin = detail::rope_table(sin, "sin", q_in, p.batch, p.seq, p.head_dim, mrope);
  LIGER_CHECK_ARG(sin.scalar_type() == cos.scalar_type(), "sin", "expected cos's dtype (", cos.scalar_type(),
                  "), got ", sin.scalar_type());
  const int64_t half = p.head_dim / 2;
  if (mrope) {
    const c10::IntArrayRef s = *sections;
    const bool ok = s.size() == 3 && s[0] >= 0 && s[1] >= 0 && s[2] >= 0 && s[0] + s[1] + s[2] == half;
    LIGER_CHECK_ARG(ok, "mrope_section", "expected 3 non-negative sections (t, h, w) summing to D/2 = ", half,
                    ", got ", detail::sections_str(s));
    p.section0 = s[0];
    p.section1 = s[1];
  } else {
    p.section0 = half;
    p.section1 = 0;
  }
  // Outputs with the inputs' layout: empty_like keeps the strides of a dense
  // input (HF's proj(x).view(B, S, H, D).transpose(1, 2) stays (B, S, H, D) in
  // memory, as HF's own result is); a non-dense input gets a contiguous output.
  p.q_out = at::empty_like(q_src);
  p.k_out = at::empty_like(k_src);
  p.q_out_v = heads_first ? p.q_out : p.q_out.transpose(1, 2);
  p.k_out_v = heads_first ? p.k_out : p.k_out.transpose(1, 2);
  return p;
}

}  // namespace liger_cpp
