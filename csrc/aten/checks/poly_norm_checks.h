// Argument checks of PolyNorm, shared by the CPU and CUDA ops.
#pragma once

#include "aten/checks/common.h"

namespace liger_cpp {

// x: (..., C), C > 0, float32/float16/bfloat16 (float64 on CPU), any strides (read through a dense
// copy); weight: 3 elements, bias: 1 element, floating, on x's device.
inline void check_poly_norm_inputs(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                   bool cuda) {
  const bool allow_double = !cuda;
  LIGER_CHECK_ARG(x.dim() >= 1, "x", "expected a tensor of at least 1 dimension, got a scalar");
  LIGER_CHECK_ARG(x.size(-1) > 0, "x", "expected a non-empty last dimension, got shape ", shape_str(x));
  LIGER_CHECK_ARG(is_float_type(x.scalar_type(), allow_double), "x", "expected float32, float16 or bfloat16",
                  allow_double ? " (or float64 on CPU)" : "", ", got ", dtype_str(x.scalar_type()));
  LIGER_CHECK_ARG(weight.dim() == 1 && weight.size(0) == 3, "weight", "expected shape (3,), got ",
                  shape_str(weight));
  LIGER_CHECK_ARG(bias.numel() == 1, "bias", "expected one element, got shape ", shape_str(bias));
  const at::Tensor* params[2] = {&weight, &bias};
  const char* names[2] = {"weight", "bias"};
  for (int i = 0; i < 2; ++i) {
    LIGER_CHECK_ARG(is_float_type(params[i]->scalar_type(), allow_double), names[i],
                    "expected float32, float16 or bfloat16", allow_double ? " (or float64 on CPU)" : "",
                    ", got ", dtype_str(params[i]->scalar_type()));
    LIGER_CHECK_ARG(params[i]->device() == x.device(), names[i], "expected device ", x.device(),
                    " (x's), got ", params[i]->device());
  }
}

// rstd's dtype: float32, float64 for float64 x (the CPU's gradcheck dtype).
inline at::ScalarType poly_norm_rstd_dtype(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// dy: x's shape, dtype and device; rstd: the forward's dense (..., 3) statistics.
inline void check_poly_norm_grad(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& rstd) {
  check_grad_like(dy, x);
  LIGER_CHECK_ARG(
      rstd.scalar_type() == poly_norm_rstd_dtype(x) && rstd.is_contiguous() &&
          rstd.numel() == x.numel() / x.size(-1) * 3 && rstd.device() == x.device(),
      "rstd",
      "expected the forward's dense (..., 3) statistics (float32; float64 for float64 x) on x's device, got ",
      dtype_str(rstd.scalar_type()), " ", shape_str(rstd));
}

}  // namespace liger_cpp
