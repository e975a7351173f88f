// RMSNorm CUDA host wrapper: checks the inputs, guards the device, takes the
// current stream, maps dtypes and calls the ATen-free launchers.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "aten/checks/common.h"
#include "aten/checks/rms_norm_checks.h"
#include "aten/cuda/cuda_common.h"
#include "kernels/rms_norm/rms_norm.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace rms_norm_cuda_impl {

namespace k = kernels;

std::tuple<at::Tensor, at::Tensor> rms_norm_fwd_cuda(const at::Tensor& X, const c10::optional<at::Tensor>& W,
                                                     double eps, double offset, c10::string_view casting_mode,
                                                     bool /*in_place*/) {
  const Casting casting = parse_casting(casting_mode);
  check_norm_inputs(X, W, /*cuda=*/true);
  const c10::cuda::CUDAGuard guard(X.device());
  const bool has_w = W.has_value() && W->defined();
  const at::Tensor x2 = as_rows(X);
  const at::Tensor w = has_w ? W->contiguous() : at::Tensor();
  const auto out_dtype = rms_norm_out_dtype(X, W, casting);
  at::Tensor y = at::empty(X.sizes(), X.options().dtype(out_dtype));
  at::Tensor rstd = at::empty(X.sizes().slice(0, X.dim() - 1), X.options().dtype(at::kFloat));

  k::RmsNormFwdArgs a{};
  a.x = x2.data_ptr();
  a.x_row_stride = x2.stride(0);
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
  return {y, rstd};
}

// Fills the kernel arguments and runs the backward; dx2 may alias dY.
at::Tensor rms_norm_bwd_into(const at::Tensor& dY, const at::Tensor& X, const c10::optional<at::Tensor>& W,
                             const at::Tensor& RSTD, double offset, Casting casting, bool compute_dw,
                             const at::Tensor& dy2, at::Tensor& dx2) {
  const bool has_w = W.has_value() && W->defined();
  const bool want_dw = has_w && compute_dw;
  const at::Tensor x2 = as_rows(X);
  const at::Tensor w = has_w ? W->contiguous() : at::Tensor();
  const at::Tensor rstd = RSTD.contiguous();
  at::Tensor dw =
      at::empty({want_dw ? X.size(-1) : 0}, X.options().dtype(has_w ? w.scalar_type() : X.scalar_type()));

  k::RmsNormBwdArgs a{};
  a.dy = dy2.data_ptr();
  a.dy_row_stride = dy2.stride(0);
  a.x = x2.data_ptr();
  a.x_row_stride = x2.stride(0);
  a.w = has_w ? w.data_ptr() : nullptr;
  a.rstd = rstd.data_ptr<float>();
  a.dx = dx2.data_ptr();
  a.dx_row_stride = dx2.stride(0);
  a.dw = want_dw ? dw.data_ptr() : nullptr;
  a.rows = x2.size(0);
  a.cols = x2.size(1);
  a.offset = static_cast<float>(offset);
  a.casting = static_cast<k::RmsCasting>(casting);
  a.x_dtype = to_kernel_dtype(X.scalar_type(), "X");
  a.w_dtype = has_w ? to_kernel_dtype(w.scalar_type(), "W") : a.x_dtype;
  a.y_dtype = to_kernel_dtype(dY.scalar_type(), "dY");
  const k::RmsNormBwdPlan plan = k::rms_norm_bwd_plan(a, device_info());
  at::Tensor workspace;  // exactly the plan's dW partial rows
  if (plan.workspace_floats > 0) {
    workspace = at::empty({plan.workspace_floats}, X.options().dtype(at::kFloat));
    a.workspace = workspace.data_ptr<float>();
  }
  LIGER_CUDA_CHECK(k::rms_norm_bwd(a, plan, at::cuda::getCurrentCUDAStream()));
  return dw;
}

std::tuple<at::Tensor, at::Tensor> rms_norm_bwd_cuda(const at::Tensor& dY, const at::Tensor& X,
                                                     const c10::optional<at::Tensor>& W,
                                                     const at::Tensor& RSTD, double offset,
                                                     c10::string_view casting_mode, bool compute_dw) {
  const Casting casting = parse_casting(casting_mode);
  check_rms_norm_bwd(dY, X, W, RSTD, casting, /*cuda=*/true);
  const c10::cuda::CUDAGuard guard(X.device());
  at::Tensor dx = at::empty(X.sizes(), X.options());
  at::Tensor dx2 = dx.view({-1, X.size(-1)});
  const at::Tensor dy2 = as_rows(dY);
  at::Tensor dw = rms_norm_bwd_into(dY, X, W, RSTD, offset, casting, compute_dw, dy2, dx2);
  return {dx, dw};
}

at::Tensor rms_norm_bwd_inplace_cuda(at::Tensor& dY, const at::Tensor& X, const c10::optional<at::Tensor>& W,
                                     const at::Tensor& RSTD, double offset, c10::string_view casting_mode,
                                     bool compute_dw) {
  const Casting casting = parse_casting(casting_mode);
  check_rms_norm_bwd(dY, X, W, RSTD, casting, /*cuda=*/true);
  LIGER_CHECK_ARG(dY.scalar_type() == X.scalar_type(), "dY", "in-place backward needs dY of X's dtype (",
                  dtype_str(X.scalar_type()), "), got ", dtype_str(dY.scalar_type()));
  LIGER_CHECK_ARG(dY.is_contiguous(), "dY", "in-place backward needs a contiguous dY");
  const c10::cuda::CUDAGuard guard(X.device());
  at::Tensor dx2 = dY.view({-1, X.size(-1)});
  at::Tensor dw = rms_norm_bwd_into(dY, X, W, RSTD, offset, casting, compute_dw, dx2, dx2);
  mark_written(dY);
  return dw;
}

}  // namespace rms_norm_cuda_impl

TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace rms_norm_cuda_impl;  // NOLINT(build/namespaces)

  m.impl("rms_norm_fwd", &rms_norm_fwd_cuda);
  m.impl("rms_norm_bwd", &rms_norm_bwd_cuda);
  m.impl("rms_norm_bwd_", &rms_norm_bwd_inplace_cuda);
}

}  // namespace liger_cpp
