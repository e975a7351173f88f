// Argument checks for LayerNorm, shared by the CPU and CUDA ops.
#pragma once

#include "aten/checks/common.h"

namespace liger_cpp {

inline void check_layer_norm_fwd(const at::Tensor& X, const c10::optional<at::Tensor>& W,
                                 const c10::optional<at::Tensor>& B, bool cuda) {
  check_norm_inputs(X, W, cuda);
  if (B.has_value() && B->defined()) {
    const auto& b = *B;
    LIGER_CHECK_ARG(b.dim() == 1 && b.size(0) == X.size(-1), "B", "expected shape (", X.size(-1),
                    ",) to match X's last dimension, got ", b.sizes());
    LIGER_CHECK_ARG(b.device() == X.device(), "B", "expected device ", X.device(), " (X's), got ",
                    b.device());
    LIGER_CHECK_ARG(
        b.scalar_type() == X.scalar_type() || b.scalar_type() == at::kFloat || X.scalar_type() == at::kFloat,
        "B", "expected X's dtype (", X.scalar_type(), ") or float32, got ", b.scalar_type());
    if (W.has_value() && W->defined())
      LIGER_CHECK_ARG(b.scalar_type() == W->scalar_type(), "B", "expected W's dtype (", W->scalar_type(),
                      "), got ", b.scalar_type());
  }
}

inline void check_layer_norm_bwd(const at::Tensor& dY, const at::Tensor& X,
                                 const c10::optional<at::Tensor>& W, const at::Tensor& MEAN,
                                 const at::Tensor& RSTD, bool cuda) {
  check_norm_inputs(X, W, cuda);
  LIGER_CHECK_ARG(dY.sizes() == X.sizes(), "dY", "expected X's shape ", X.sizes(), ", got ", dY.sizes());
  LIGER_CHECK_ARG(dY.device() == X.device(), "dY", "expected device ", X.device(), ", got ", dY.device());
  LIGER_CHECK_ARG(dY.scalar_type() == X.scalar_type(), "dY", "expected X's dtype (", X.scalar_type(),
                  "), got ", dY.scalar_type());
  const auto acc = X.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const int64_t rows = X.numel() / X.size(-1);
  for (const auto& [t, name] : {std::pair<const at::Tensor&, const char*>{MEAN, "MEAN"}, {RSTD, "RSTD"}}) {
    LIGER_CHECK_ARG(t.scalar_type() == acc, name, "expected float32 (float64 for float64 X), got ",
                    t.scalar_type());
    LIGER_CHECK_ARG(t.numel() == rows, name, "expected ", rows, " elements (one per row of X), got ",
                    t.numel());
    LIGER_CHECK_ARG(t.device() == X.device(), name, "expected device ", X.device(), ", got ", t.device());
  }
}

// dtype of the backward's dW and dB: W's; without W, float32 for 16-bit X (dB
// belongs to a bias that may be wider than X: rounding it to X's dtype would
// lose what the caller's fp32 bias keeps), X's otherwise.
inline at::ScalarType ln_grad_dtype(const c10::optional<at::Tensor>& W, const at::Tensor& X) {
  if (W.has_value() && W->defined()) return W->scalar_type();
  const auto x = X.scalar_type();
  return x == at::kHalf || x == at::kBFloat16 ? at::kFloat : x;
}

}  // namespace liger_cpp
