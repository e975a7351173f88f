// LayerNorm CUDA host wrapper: checks the inputs, guards the device, takes the
// current stream, maps dtypes and calls the ATen-free launchers.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "aten/checks/common.h"
#include "aten/checks/layer_norm_checks.h"
#include "aten/cuda/cuda_common.h"
#include "kernels/layer_norm/layer_norm.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace layer_norm_cuda_impl {

namespace k = kernels;

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_fwd_cuda(const at::Tensor& X,
                                                                   const c10::optional<at::Tensor>& W,
                                                                   const c10::optional<at::Tensor>& B,
                                                                   double eps) {
  check_layer_norm_fwd(X, W, B, /*cuda=*/true);
  const c10::cuda::CUDAGuard guard(X.device());
  const bool has_w = W.has_value() && W->defined();
  const bool has_b = B.has_value() && B->defined();
  const at::Tensor x2 = as_rows(X);
  const at::Tensor w = has_w ? W->contiguous() : at::Tensor();
  const at::Tensor b = has_b ? B->contiguous() : at::Tensor();
  at::Tensor y = at::empty(X.sizes(), X.options());
  at::Tensor mean = at::empty(X.sizes().slice(0, X.dim() - 1), X.options().dtype(at::kFloat));
  at::Tensor rstd = at::empty(X.sizes().slice(0, X.dim() - 1), X.options().dtype(at::kFloat));

  k::LayerNormFwdArgs a{};
  a.x = x2.data_ptr();
  a.x_row_stride = x2.stride(0);
  a.w = has_w ? w.data_ptr() : nullptr;
  a.b = has_b ? b.data_ptr() : nullptr;
  a.y = y.data_ptr();
  a.mean = mean.data_ptr<float>();
  a.rstd = rstd.data_ptr<float>();
  a.rows = x2.size(0);
  a.cols = x2.size(1);
  a.eps = static_cast<float>(eps);
  a.x_dtype = to_kernel_dtype(X.scalar_type(), "X");
  a.w_dtype = has_w   ? to_kernel_dtype(w.scalar_type(), "W")
              : has_b ? to_kernel_dtype(b.scalar_type(), "B")
                      : a.x_dtype;
  LIGER_CUDA_CHECK(k::layer_norm_fwd(a, k::layer_norm_fwd_plan(a), at::cuda::getCurrentCUDAStream()));
  return {y, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_bwd_cuda(const at::Tensor& dY, const at::Tensor& X,
                                                                   const c10::optional<at::Tensor>& W,
                                                                   const at::Tensor& MEAN,
                                                                   const at::Tensor& RSTD, bool compute_dw,
                                                                   bool compute_db) {
  check_layer_norm_bwd(dY, X, W, MEAN, RSTD, /*cuda=*/true);
  const c10::cuda::CUDAGuard guard(X.device());
  const bool has_w = W.has_value() && W->defined();
  const bool want_dw = has_w && compute_dw;
  const int64_t n = X.size(-1);
  const at::Tensor x2 = as_rows(X);
  const at::Tensor dy2 = as_rows(dY);
  const at::Tensor w = has_w ? W->contiguous() : at::Tensor();
  const at::Tensor mean = MEAN.contiguous(), rstd = RSTD.contiguous();
  const auto p_dtype = ln_grad_dtype(W, X);
  at::Tensor dx = at::empty(X.sizes(), X.options());
  at::Tensor dw = at::empty({want_dw ? n : 0}, X.options().dtype(p_dtype));
  at::Tensor db = at::empty({compute_db ? n : 0}, X.options().dtype(p_dtype));

  k::LayerNormBwdArgs a{};
  a.dy = dy2.data_ptr();
  a.dy_row_stride = dy2.stride(0);
  a.x = x2.data_ptr();
  a.x_row_stride = x2.stride(0);
  a.w = has_w ? w.data_ptr() : nullptr;
  a.mean = mean.data_ptr<float>();
  a.rstd = rstd.data_ptr<float>();
  a.dx = dx.data_ptr();
  a.dw = want_dw ? dw.data_ptr() : nullptr;
  a.db = compute_db ? db.data_ptr() : nullptr;
  a.rows = x2.size(0);
  a.cols = n;
  a.x_dtype = to_kernel_dtype(X.scalar_type(), "X");
  a.w_dtype = to_kernel_dtype(p_dtype, "W");
  const k::LayerNormBwdPlan plan = k::layer_norm_bwd_plan(a, device_info());
  at::Tensor workspace;  // exactly the plan's dW / dB partial rows
  if (plan.workspace_floats > 0) {
    workspace = at::empty({plan.workspace_floats}, X.options().dtype(at::kFloat));
    a.workspace = workspace.data_ptr<float>();
  }
  LIGER_CUDA_CHECK(k::layer_norm_bwd(a, plan, at::cuda::getCurrentCUDAStream()));
  return {dx, dw, db};
}

}  // namespace layer_norm_cuda_impl

TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace layer_norm_cuda_impl;  // NOLINT(build/namespaces)

  m.impl("layer_norm_fwd", &layer_norm_fwd_cuda);
  m.impl("layer_norm_bwd", &layer_norm_bwd_cuda);
}

}  // namespace liger_cpp
