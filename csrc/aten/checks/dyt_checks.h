// Argument checks of DyT, shared by the CPU and CUDA ops, and the parameters' working dtype.
#pragma once

#include <optional>

#include "aten/checks/common.h"

namespace liger_cpp {

// x: (..., C), float32/float16/bfloat16 (float64 on CPU), any strides (read through a dense copy);
// alpha: one element; gamma: (C,); beta: (C,) or None; floating, on x's device.
inline void check_dyt_inputs(const at::Tensor& x, const at::Tensor& alpha, const at::Tensor& gamma,
                             const std::optional<at::Tensor>& beta, bool cuda) {
  const bool allow_double = !cuda;
  LIGER_CHECK_ARG(x.dim() >= 1, "x", "expected a tensor of at least 1 dimension, got a scalar");
  LIGER_CHECK_ARG(is_float_type(x.scalar_type(), allow_double), "x", "expected float32, float16 or bfloat16",
                  allow_double ? " (or float64 on CPU)" : "", ", got ", dtype_str(x.scalar_type()));
  const int64_t c = x.size(-1);
  LIGER_CHECK_ARG(alpha.numel() == 1, "alpha", "expected one element, got shape ", shape_str(alpha));
  LIGER_CHECK_ARG(gamma.dim() == 1 && gamma.size(0) == c, "gamma", "expected shape (", c,
                  ",) (x's last dimension), got ", shape_str(gamma));
  const at::Tensor* params[3] = {&alpha, &gamma, beta.has_value() && beta->defined() ? &*beta : nullptr};
  const char* names[3] = {"alpha", "gamma", "beta"};
  if (params[2] != nullptr)
    LIGER_CHECK_ARG(beta->dim() == 1 && beta->size(0) == c, "beta", "expected shape (", c,
                    ",) (x's last dimension), got ", shape_str(*beta));
  for (int i = 0; i < 3; ++i) {
    if (params[i] == nullptr) continue;
    LIGER_CHECK_ARG(is_float_type(params[i]->scalar_type(), allow_double), names[i],
                    "expected float32, float16 or bfloat16", allow_double ? " (or float64 on CPU)" : "",
                    ", got ", dtype_str(params[i]->scalar_type()));
    LIGER_CHECK_ARG(params[i]->device() == x.device(), names[i], "expected device ", x.device(),
                    " (x's), got ", params[i]->device());
  }
}

}  // namespace liger_cpp
