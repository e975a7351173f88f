// Argument checks for the RMSNorm backward, shared by the CPU and CUDA ops.
#pragma once

#include "aten/checks/common.h"

namespace liger_cpp {

inline void check_rms_norm_bwd(const at::Tensor& dY, const at::Tensor& X, const c10::optional<at::Tensor>& W,
                               const at::Tensor& RSTD, Casting casting, bool cuda) {
  check_norm_inputs(X, W, cuda);
  LIGER_CHECK_ARG(dY.sizes() == X.sizes(), "dY", "expected X's shape ", shape_str(X), ", got ",
                  shape_str(dY));
  LIGER_CHECK_ARG(dY.device() == X.device(), "dY", "expected device ", X.device(), ", got ", dY.device());
  const auto out = rms_norm_out_dtype(X, W, casting);
  LIGER_CHECK_ARG(dY.scalar_type() == out, "dY", "expected dtype ", dtype_str(out),
                  " (the forward output's), got ", dtype_str(dY.scalar_type()));
  LIGER_CHECK_ARG(RSTD.scalar_type() == (X.scalar_type() == at::kDouble ? at::kDouble : at::kFloat), "RSTD",
                  "expected float32 (float64 for float64 X), got ", dtype_str(RSTD.scalar_type()));
  LIGER_CHECK_ARG(RSTD.numel() == X.numel() / X.size(-1), "RSTD", "expected ", X.numel() / X.size(-1),
                  " elements (one per row of X), got ", RSTD.numel());
  LIGER_CHECK_ARG(RSTD.device() == X.device(), "RSTD", "expected device ", X.device(), ", got ",
                  RSTD.device());
}

}  // namespace liger_cpp
