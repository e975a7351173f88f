// Argument checks of ReLU squared, shared by the CPU and CUDA ops.
#pragma once

#include "aten/checks/common.h"

namespace liger_cpp {

// x: any shape, float32/float16/bfloat16 (float64 on CPU). Read through a contiguous copy when it
// is not contiguous (the kernels take dense operands).
inline void check_relu_squared_input(const at::Tensor& x, bool cuda) {
  const bool allow_double = !cuda;
  LIGER_CHECK_ARG(is_float_type(x.scalar_type(), allow_double), "x", "expected float32, float16 or bfloat16",
                  allow_double ? " (or float64 on CPU)" : "", ", got ", dtype_str(x.scalar_type()));
}

// dy: x's shape, dtype and device (any strides).
inline void check_relu_squared_bwd(const at::Tensor& dy, const at::Tensor& x, bool cuda) {
  check_relu_squared_input(x, cuda);
  check_grad_like(dy, x);
}

}  // namespace liger_cpp
