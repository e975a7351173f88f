// Argument checks and options of liger::moe_experts_{fwd,bwd} (csrc/schema.cpp), shared by the CPU
// and CUDA implementations.
#pragma once

#include <ATen/ATen.h>

#include <string_view>

#include "aten/checks/common.h"

namespace liger_cpp {

// The activations, numbered as kernels::MoeAct (csrc/kernels/moe/moe.h; not included here: the
// CPU-only build has no CUDA headers).
enum class MoeActivation : int { kSilu = 0, kGeluTanh = 1, kGptOss = 2 };

inline MoeActivation parse_moe_activation(std::string_view s) {
  if (s == "silu") return MoeActivation::kSilu;
  if (s == "gelu_tanh") return MoeActivation::kGeluTanh;
  if (s == "gpt_oss") return MoeActivation::kGptOss;
  LIGER_FAIL("argument 'activation': expected 'silu', 'gelu_tanh' or 'gpt_oss', got '", s, "'");
}

// The problem's sizes, from checked arguments.
struct MoeShape {
  int64_t T, k, S, E, H, I;
};

// hidden [T, H]; top_k_index, top_k_weights [T, k]; gate_up_proj [E, 2I, H] ([E, H, 2I] when
// transposed); down_proj [E, H, I] ([E, I, H] when transposed); gate_up_bias [E, 2I] and
// down_bias [E, H] or undefined. Same device; hidden and the weights of one dtype.
inline MoeShape check_moe_inputs(const at::Tensor& hidden, const at::Tensor& top_k_index,
                                 const at::Tensor& top_k_weights, const at::Tensor& gate_up_proj,
                                 const at::Tensor& down_proj, const at::Tensor& gate_up_bias,
                                 const at::Tensor& down_bias, bool transposed, bool cuda) {
  const bool allow_double = !cuda;
  LIGER_CHECK_ARG(hidden.dim() == 2, "hidden", "expected a 2-D tensor [T, H], got shape ", shape_str(hidden));
  LIGER_CHECK_ARG(is_float_type(hidden.scalar_type(), allow_double), "hidden",
                  "expected float32, float16 or bfloat16", allow_double ? " (or float64 on CPU)" : "",
                  ", got ", dtype_str(hidden.scalar_type()));
  const int64_t T = hidden.size(0), H = hidden.size(1);
  // The backward passes an undefined index (checked by the forward; its shape is the weights').
  const at::Tensor& shape_of_k = top_k_index.defined() ? top_k_index : top_k_weights;
  if (top_k_index.defined()) {
    LIGER_CHECK_ARG(top_k_index.dim() == 2 && top_k_index.size(0) == T, "top_k_index", "expected shape (", T,
                    ", k) to match hidden's tokens, got ", shape_str(top_k_index));
    check_index_dtype(top_k_index, "top_k_index", "expert indices");
  }
  LIGER_CHECK_ARG(shape_of_k.dim() == 2, "top_k_weights", "expected a 2-D tensor [T, k], got shape ",
                  shape_str(shape_of_k));
  const int64_t k = shape_of_k.size(1);
  LIGER_CHECK_ARG(k >= 1, "top_k_index", "expected at least one expert a token, got shape ",
                  shape_str(shape_of_k));
  LIGER_CHECK_ARG(top_k_weights.dim() == 2 && top_k_weights.size(0) == T && top_k_weights.size(1) == k,
                  "top_k_weights", "expected shape (", T, ", ", k, ") (top_k_index's), got ",
                  shape_str(top_k_weights));
  LIGER_CHECK_ARG(is_float_type(top_k_weights.scalar_type(), allow_double), "top_k_weights",
                  "expected a float tensor, got ", dtype_str(top_k_weights.scalar_type()));
  LIGER_CHECK_ARG(gate_up_proj.dim() == 3, "gate_up_proj", "expected a 3-D tensor ",
                  transposed ? "[E, H, 2I]" : "[E, 2I, H]", ", got shape ", shape_str(gate_up_proj));
  const int64_t E = gate_up_proj.size(0);
  const int64_t two_i = transposed ? gate_up_proj.size(2) : gate_up_proj.size(1);
  const int64_t gh = transposed ? gate_up_proj.size(1) : gate_up_proj.size(2);
  LIGER_CHECK_ARG(E >= 1, "gate_up_proj", "expected at least one expert, got shape ",
                  shape_str(gate_up_proj));
  LIGER_CHECK_ARG(gh == H && two_i % 2 == 0 && two_i > 0, "gate_up_proj", "expected ",
                  transposed ? "[E, H, 2I]" : "[E, 2I, H]", " with H = ", H,
                  " (hidden's) and an even 2I, got ", shape_str(gate_up_proj));
  const int64_t I = two_i / 2;
  const bool down_ok = down_proj.dim() == 3 && down_proj.size(0) == E &&
                       (transposed ? (down_proj.size(1) == I && down_proj.size(2) == H)
                                   : (down_proj.size(1) == H && down_proj.size(2) == I));
  LIGER_CHECK_ARG(down_ok, "down_proj", "expected shape (", E, ", ", transposed ? I : H, ", ",
                  transposed ? H : I, "), got ", shape_str(down_proj));
  for (const auto* p : {&gate_up_proj, &down_proj}) {
    const char* name = p == &gate_up_proj ? "gate_up_proj" : "down_proj";
    LIGER_CHECK_ARG(p->scalar_type() == hidden.scalar_type(), name, "expected hidden's dtype (",
                    dtype_str(hidden.scalar_type()), "), got ", dtype_str(p->scalar_type()));
  }
  if (gate_up_bias.defined()) {
    LIGER_CHECK_ARG(gate_up_bias.dim() == 2 && gate_up_bias.size(0) == E && gate_up_bias.size(1) == 2 * I,
                    "gate_up_bias", "expected shape (", E, ", ", 2 * I, "), got ", shape_str(gate_up_bias));
    LIGER_CHECK_ARG(gate_up_bias.scalar_type() == hidden.scalar_type(), "gate_up_bias",
                    "expected hidden's dtype (", dtype_str(hidden.scalar_type()), "), got ",
                    dtype_str(gate_up_bias.scalar_type()));
  }
  if (down_bias.defined()) {
    LIGER_CHECK_ARG(down_bias.dim() == 2 && down_bias.size(0) == E && down_bias.size(1) == H, "down_bias",
                    "expected shape (", E, ", ", H, "), got ", shape_str(down_bias));
    LIGER_CHECK_ARG(down_bias.scalar_type() == hidden.scalar_type(), "down_bias", "expected hidden's dtype (",
                    dtype_str(hidden.scalar_type()), "), got ", dtype_str(down_bias.scalar_type()));
  }
  const std::pair<const at::Tensor*, const char*> all[] = {
      {&top_k_index, "top_k_index"}, {&top_k_weights, "top_k_weights"}, {&gate_up_proj, "gate_up_proj"},
      {&down_proj, "down_proj"},     {&gate_up_bias, "gate_up_bias"},   {&down_bias, "down_bias"}};
  for (const auto& [t, name] : all)
    if (t->defined())
      LIGER_CHECK_ARG(t->device() == hidden.device(), name, "expected device ", hidden.device(),
                      " (hidden's), got ", t->device());
  const int64_t S = T * k;
  LIGER_CHECK_ARG(S < (int64_t{1} << 31), "top_k_index",
                  "expected fewer than 2^31 routed slots (T * k), got ", S);
  // The CUDA routing counts a chunk's slots per expert in shared memory (4 bytes an expert).
  LIGER_CHECK_ARG(E <= 16384, "gate_up_proj", "expected at most 16384 experts, got ", E);
  return {T, k, S, E, H, I};
}

// The CPU rule for indices: every expert index in [0, E). (On CUDA an index outside it drops its
// slot instead, the kernels cannot raise: see docs/kernels/moe.md.)
inline void check_moe_index_range(const at::Tensor& top_k_index, int64_t E) {
  if (top_k_index.numel() == 0) return;
  const int64_t lo = top_k_index.min().item<int64_t>(), hi = top_k_index.max().item<int64_t>();
  LIGER_CHECK_ARG(lo >= 0 && hi < E, "top_k_index", "expected expert indices in [0, ", E,
                  "), got values in [", lo, ", ", hi, "]");
}

}  // namespace liger_cpp
