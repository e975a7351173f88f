// FusedAddRMSNorm on the CPU: S = X + R (ATen's add, float math rounded once to
// X's dtype), then the RMSNorm CPU implementation on S. The backward adds
// dS_out to RMSNorm's dX (dS = dX + dS_out, two roundings for low-precision
// dtypes, where the CUDA kernel rounds once).
#include <torch/library.h>

#include "aten/checks/common.h"
#include "aten/checks/fused_add_rms_norm_checks.h"
#include "aten/cpu/rms_norm_cpu.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace fused_add_rms_norm_cpu_impl {

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_add_rms_norm_fwd_cpu(
    const at::Tensor& X, const at::Tensor& R, const c10::optional<at::Tensor>& W, double eps, double offset,
    c10::string_view casting_mode, bool /*in_place*/) {
  parse_casting(casting_mode);
  check_fused_add_fwd(X, R, W, /*cuda=*/false);
  at::Tensor s = at::add(X, R).contiguous();
  auto [y, rstd] = rms_norm_fwd_cpu_impl(s, W, eps, offset, casting_mode);
  return {y, s, rstd};
}

std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm_bwd_cpu(
    const at::Tensor& dY, const c10::optional<at::Tensor>& dS_out, const at::Tensor& S,
    const c10::optional<at::Tensor>& W, const at::Tensor& RSTD, double offset, c10::string_view casting_mode,
    bool compute_dw) {
  const Casting casting = parse_casting(casting_mode);
  check_fused_add_bwd(dY, dS_out, S, W, RSTD, casting, /*cuda=*/false);
  auto [ds, dw] = rms_norm_bwd_cpu_impl(dY, S, W, RSTD, offset, casting_mode, compute_dw);
  if (dS_out.has_value() && dS_out->defined()) ds.add_(*dS_out);
  return {ds, dw};
}

}  // namespace fused_add_rms_norm_cpu_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace fused_add_rms_norm_cpu_impl;  // NOLINT(build/namespaces)

  m.impl("fused_add_rms_norm_fwd", &fused_add_rms_norm_fwd_cpu);
  m.impl("fused_add_rms_norm_bwd", &fused_add_rms_norm_bwd_cpu);
}

}  // namespace liger_cpp
