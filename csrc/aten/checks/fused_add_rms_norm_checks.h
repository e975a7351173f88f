// Argument checks for FusedAddRMSNorm, shared by the CPU and CUDA ops.
#pragma once

#include "aten/checks/common.h"
#include "aten/checks/rms_norm_checks.h"

namespace liger_cpp {

inline void check_fused_add_fwd(const at::Tensor& X, const at::Tensor& R, const c10::optional<at::Tensor>& W,
                                bool cuda) {
  check_norm_inputs(X, W, cuda);
  LIGER_CHECK_ARG(R.sizes() == X.sizes(), "R", "expected X's shape ", X.sizes(), ", got ", R.sizes());
  LIGER_CHECK_ARG(R.device() == X.device(), "R", "expected device ", X.device(), " (X's), got ", R.device());
  LIGER_CHECK_ARG(R.scalar_type() == X.scalar_type(), "R", "expected X's dtype (", X.scalar_type(), "), got ",
                  R.scalar_type());
}

inline void check_fused_add_bwd(const at::Tensor& dY, const c10::optional<at::Tensor>& dS_out,
                                const at::Tensor& S, const c10::optional<at::Tensor>& W,
                                const at::Tensor& RSTD, Casting casting, bool cuda) {
  check_norm_inputs(S, W, cuda);
  LIGER_CHECK_ARG(dY.sizes() == S.sizes(), "dY", "expected S's shape ", S.sizes(), ", got ", dY.sizes());
  if (dS_out.has_value() && dS_out->defined()) {
    const auto& d = *dS_out;
    LIGER_CHECK_ARG(d.sizes() == S.sizes(), "dS_out", "expected S's shape ", S.sizes(), ", got ", d.sizes());
    LIGER_CHECK_ARG(d.device() == S.device(), "dS_out", "expected device ", S.device(), ", got ", d.device());
    LIGER_CHECK_ARG(d.scalar_type() == S.scalar_type(), "dS_out", "expected S's dtype (", S.scalar_type(),
                    "), got ", d.scalar_type());
  }
  check_rms_norm_bwd(dY, S, W, RSTD, casting, cuda);
}

}  // namespace liger_cpp
