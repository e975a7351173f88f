// Argument checks and the common [b][s][head][d] view of a Llama 4 complex-RoPE problem, shared by
// the CPU and CUDA ops (and by their forward and backward).
#pragma once

#include <ATen/ATen.h>

#include "aten/checks/common.h"

namespace liger_cpp {

// q, k (or the output gradients) as (B, S, H, D) views whatever the caller's layout; freqs as a
// (B or 1, S, P, 2) view with dense (P, 2) rows; the outputs allocated with the inputs' layout and
// returned in the caller's order of dimensions.
struct Llama4RopeProblem {
  at::Tensor q, k;              // (B, S, Hq, D), (B, S, Hk, D) views of the (unit-last-stride) inputs
  at::Tensor q_out, k_out;      // the outputs as returned
  at::Tensor q_out_v, k_out_v;  // their (B, S, H, D) views
  at::Tensor freqs;             // (B or 1, S, P, 2)
  int64_t batch = 0, seq = 0, pairs = 0;
};

namespace detail {

inline at::Tensor llama4_operand(const at::Tensor& t, const char* name, bool heads_first) {
  LIGER_CHECK_ARG(t.dim() == 4, name, "expected a 4-D tensor ",
                  heads_first ? "(B, H, S, D) (heads_first=True)" : "(B, S, H, D) (heads_first=False)",
                  ", got shape ", shape_str(t));
  return t.stride(3) == 1 ? t : t.contiguous();
}

}  // namespace detail

// Stride of dimension d for the kernels: 0 when the dimension has one element.
inline int64_t llama4_stride(const at::Tensor& t, int64_t d) { return t.size(d) == 1 ? 0 : t.stride(d); }

// freqs: (S, P, 2), (1, S, P, 2) or (B, S, P, 2), float32 (or q's dtype when q is float64 on the
// CPU): torch.view_as_real of HF's complex freqs_cis.
inline Llama4RopeProblem prepare_llama4_rope(const at::Tensor& q_in, const at::Tensor& k_in,
                                             const at::Tensor& freqs, bool heads_first, bool cuda,
                                             const char* q_name, const char* k_name) {
  const bool allow_double = !cuda;
  LIGER_CHECK_ARG(is_float_type(q_in.scalar_type(), allow_double), q_name,
                  "expected float32, float16 or bfloat16", allow_double ? " (or float64 on CPU)" : "",
                  ", got ", dtype_str(q_in.scalar_type()));
  LIGER_CHECK_ARG(k_in.scalar_type() == q_in.scalar_type(), k_name, "expected ", q_name, "'s dtype (",
                  dtype_str(q_in.scalar_type()), "), got ", dtype_str(k_in.scalar_type()));
  LIGER_CHECK_ARG(k_in.device() == q_in.device(), k_name, "expected device ", q_in.device(), " (", q_name,
                  "'s), got ", k_in.device());
  Llama4RopeProblem p;
  const at::Tensor q_src = detail::llama4_operand(q_in, q_name, heads_first);
  const at::Tensor k_src = detail::llama4_operand(k_in, k_name, heads_first);
  p.q = heads_first ? q_src.transpose(1, 2) : q_src;
  p.k = heads_first ? k_src.transpose(1, 2) : k_src;
  p.batch = p.q.size(0);
  p.seq = p.q.size(1);
  const int64_t D = p.q.size(3);
  LIGER_CHECK_ARG(D > 0 && D % 2 == 0, q_name,
                  "expected an even, positive head dim D (interleaved pairs (2j, 2j+1)), got shape ",
                  shape_str(q_in));
  p.pairs = D / 2;
  LIGER_CHECK_ARG(p.k.size(3) == D, k_name, "expected the head dim D = ", D, " of ", q_name, ", got shape ",
                  shape_str(k_in));
  LIGER_CHECK_ARG(p.k.size(0) == p.batch && p.k.size(1) == p.seq, k_name, "expected batch ", p.batch,
                  " and sequence length ", p.seq, " of ", q_name, ", got shape ", shape_str(k_in));
  LIGER_CHECK_ARG(freqs.device() == q_in.device(), "freqs", "expected device ", q_in.device(), " (", q_name,
                  "'s), got ", freqs.device());
  const auto fdt = freqs.scalar_type();
  LIGER_CHECK_ARG(
      fdt == at::kFloat || (allow_double && fdt == at::kDouble && q_in.scalar_type() == at::kDouble), "freqs",
      "expected float32 (torch.view_as_real of a complex64 freqs_cis), got ", dtype_str(fdt));
  LIGER_CHECK_ARG((freqs.dim() == 3 || freqs.dim() == 4) && freqs.size(-1) == 2, "freqs",
                  "expected shape (S, D/2, 2), (1, S, D/2, 2) or (B, S, D/2, 2), got ", shape_str(freqs));
  at::Tensor f = freqs.dim() == 3 ? freqs.unsqueeze(0) : freqs;
  LIGER_CHECK_ARG(f.size(2) == p.pairs, "freqs", "expected D/2 = ", p.pairs,
                  " frequencies a token, got shape ", shape_str(freqs));
  LIGER_CHECK_ARG(f.size(1) == p.seq, "freqs", "expected the sequence length S = ", p.seq, " of ", q_name,
                  ", got shape ", shape_str(freqs));
  LIGER_CHECK_ARG(f.size(0) == 1 || f.size(0) == p.batch, "freqs", "expected batch 1 or B = ", p.batch, " (",
                  q_name, "'s), got shape ", shape_str(freqs));
  if (f.stride(3) != 1 || f.stride(2) != 2) f = f.contiguous();
  p.freqs = f;
  p.q_out = at::empty_like(q_src);
  p.k_out = at::empty_like(k_src);
  p.q_out_v = heads_first ? p.q_out.transpose(1, 2) : p.q_out;
  p.k_out_v = heads_first ? p.k_out.transpose(1, 2) : p.k_out;
  return p;
}

}  // namespace liger_cpp
