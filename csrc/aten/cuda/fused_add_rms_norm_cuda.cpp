// FusedAddRMSNorm CUDA host wrapper: s = x + r, y = rmsnorm(s). The kernels are
// RMSNorm's (csrc/kernels/rms_norm/rms_norm.h), called with the residual operands set.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "aten/checks/common.h"
#include "aten/checks/fused_add_rms_norm_checks.h"
#include "aten/cuda/cuda_common.h"
#include "kernels/rms_norm/rms_norm.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace fused_add_rms_norm_cuda_impl {

namespace k = kernels;

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_add_rms_norm_fwd_cuda(
    const at::Tensor& X, const at::Tensor& R, const c10::optional<at::Tensor>& W, double eps, double offset,
    c10::string_view casting_mode, bool /*in_place*/) {
  const Casting casting = parse_casting(casting_mode);
  check_fused_add_fwd(X, R, W, /*cuda=*/true);
  const c10::cuda::CUDAGuard guard(X.device());
  const bool has_w = W.has_value() && W->defined();
  const at::Tensor x2 = as_rows(X);
  const at::Tensor r2 = as_rows(R);
  const at::Tensor w = has_w ? W->contiguous() : at::Tensor();
  const auto out_dtype = rms_norm_out_dtype(X, W, casting);
  at::Tensor y = at::empty(X.sizes(), X.options().dtype(out_dtype));
  at::Tensor s = at::empty(X.sizes(), X.options());
  at::Tensor rstd = at::empty(X.sizes().slice(0, X.dim() - 1), X.options().dtype(at::kFloat));

  k::RmsNormFwdArgs a{};
  a.x = x2.data_ptr();
  a.x_row_stride = x2.stride(0);
  a.res = r2.data_ptr();
  a.res_row_stride = r2.stride(0);
  a.s = s.data_ptr();
  a.w = has_w ? w.data_ptr() : nullptr;
  a.y = y.data_ptr();
  a.rstd = rstd.data_ptr<float>();
  a.rows = x2.size(0);
  a.cols = x2.size(1);
  a.eps = static_cast<float>(eps);
  a.offset = static_cast<float>(offset);
  a.casting = static_cast<k::RmsCasting>(casting);
  a.x_dtype = to_kernel_dtype(X.scalar_type(), "X");
  a.w_dtype = has_w ? to_kernel_dtype(w.scalar_type(), "W") : a.x_dtype;
  a.y_dtype = to_kernel_dtype(out_dtype, "Y");
  LIGER_CUDA_CHECK(k::rms_norm_fwd(a, k::rms_norm_fwd_plan(a), at::cuda::getCurrentCUDAStream()));
  return {y, s, rstd};
}

std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm_bwd_cuda(
    const at::Tensor& dY, const c10::optional<at::Tensor>& dS_out, const at::Tensor& S,
    const c10::optional<at::Tensor>& W, const at::Tensor& RSTD, double offset, c10::string_view casting_mode,
    bool compute_dw) {
  const Casting casting = parse_casting(casting_mode);
  check_fused_add_bwd(dY, dS_out, S, W, RSTD, casting, /*cuda=*/true);
  const c10::cuda::CUDAGuard guard(S.device());
  const bool has_w = W.has_value() && W->defined();
  const bool want_dw = has_w && compute_dw;
  const bool has_ds = dS_out.has_value() && dS_out->defined();
  const at::Tensor s2 = as_rows(S);
  const at::Tensor dy2 = as_rows(dY);
  const at::Tensor dso2 = has_ds ? as_rows(*dS_out) : at::Tensor();
  const at::Tensor w = has_w ? W->contiguous() : at::Tensor();
  const at::Tensor rstd = RSTD.contiguous();
  at::Tensor ds = at::empty(S.sizes(), S.options());
  at::Tensor ds2 = ds.view({-1, S.size(-1)});
  at::Tensor dw =
      at::empty({want_dw ? S.size(-1) : 0}, S.options().dtype(has_w ? w.scalar_type() : S.scalar_type()));

  k::RmsNormBwdArgs a{};
  a.dy = dy2.data_ptr();
  a.dy_row_stride = dy2.stride(0);
  a.x = s2.data_ptr();
  a.x_row_stride = s2.stride(0);
  a.w = has_w ? w.data_ptr() : nullptr;
  a.rstd = rstd.data_ptr<float>();
  a.ds_out = has_ds ? dso2.data_ptr() : nullptr;
  a.ds_out_row_stride = has_ds ? dso2.stride(0) : 0;
  a.dx = ds2.data_ptr();
  a.dx_row_stride = ds2.stride(0);
  a.dw = want_dw ? dw.data_ptr() : nullptr;
  a.rows = s2.size(0);
  a.cols = s2.size(1);
  a.offset = static_cast<float>(offset);
  a.casting = static_cast<k::RmsCasting>(casting);
  a.x_dtype = to_kernel_dtype(S.scalar_type(), "S");
  a.w_dtype = has_w ? to_kernel_dtype(w.scalar_type(), "W") : a.x_dtype;
  a.y_dtype = to_kernel_dtype(dY.scalar_type(), "dY");
  const k::RmsNormBwdPlan plan = k::rms_norm_bwd_plan(a, device_info());
  at::Tensor workspace;  // exactly the plan's dW partial rows
  if (plan.workspace_floats > 0) {
    workspace = at::empty({plan.workspace_floats}, S.options().dtype(at::kFloat));
    a.workspace = workspace.data_ptr<float>();
  }
  LIGER_CUDA_CHECK(k::rms_norm_bwd(a, plan, at::cuda::getCurrentCUDAStream()));
  return {ds, dw};
}

}  // namespace fused_add_rms_norm_cuda_impl

TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace fused_add_rms_norm_cuda_impl;  // NOLINT(build/namespaces)

  m.impl("fused_add_rms_norm_fwd", &fused_add_rms_norm_fwd_cuda);
  m.impl("fused_add_rms_norm_bwd", &fused_add_rms_norm_bwd_cuda);
}

}  // namespace liger_cpp
