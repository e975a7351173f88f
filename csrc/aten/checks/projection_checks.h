// Checks and row views shared by the ops that run a module's bias-free nn.Linear projections
// themselves (glu_mlp, qkv_rope): a weight in nn.Linear's (out, in) layout, and x's rows.
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "aten/checks/common.h"

namespace liger_cpp {
namespace projections {

// A weight: 2-D (rows, cols) of x's dtype and device; rows < 0: any number of rows.
inline void check_weight(const at::Tensor& w, const char* name, const at::Tensor& x, int64_t rows,
                         int64_t cols) {
  LIGER_CHECK_ARG(w.dim() == 2, name, "expected a 2-D weight, got shape ", shape_str(w));
  LIGER_CHECK_ARG((rows < 0 || w.size(0) == rows) && w.size(1) == cols, name, "expected shape (",
                  rows < 0 ? std::string("any") : std::to_string(rows), ", ", cols, "), got ", shape_str(w));
  LIGER_CHECK_ARG(w.scalar_type() == x.scalar_type(), name, "expected x's dtype (",
                  dtype_str(x.scalar_type()), "), got ", dtype_str(w.scalar_type()));
  LIGER_CHECK_ARG(w.device() == x.device(), name, "expected device ", x.device(), " (x's), got ", w.device());
}

// x: a float tensor of at least one dimension (float64 on the CPU only).
inline void check_input(const at::Tensor& x) {
  LIGER_CHECK_ARG(x.dim() >= 1, "x", "expected a tensor of at least 1 dimension, got a scalar");
  LIGER_CHECK_ARG(is_float_type(x.scalar_type(), /*allow_double=*/!x.is_cuda()), "x",
                  "expected float32, float16 or bfloat16", x.is_cuda() ? "" : " (or float64 on CPU)",
                  ", got ", dtype_str(x.scalar_type()));
}

// x's rows as an (M, H) matrix: a view where the leading dimensions fold (what nn.Linear's matmul
// gives cuBLAS), a copy otherwise.
inline at::Tensor rows(const at::Tensor& x, int64_t M, int64_t H) {
  return x.dim() == 2 ? x : x.reshape({M, H});
}

}  // namespace projections
}  // namespace liger_cpp
