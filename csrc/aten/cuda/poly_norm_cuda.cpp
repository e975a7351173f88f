// PolyNorm CUDA host wrapper: checks, device guard, current stream, the parameters in their
// working dtype, one plan, then the ATen-free launchers (csrc/kernels/poly_norm/poly_norm.h).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

#include "aten/checks/poly_norm_checks.h"
#include "aten/cuda/cuda_common.h"
#include "kernels/poly_norm/poly_norm.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace poly_norm_cuda_impl {

namespace k = kernels;
using Pair = std::tuple<at::Tensor, at::Tensor>;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// rstd's shape: x's leading dimensions, then 3.
std::vector<int64_t> rstd_shape(const at::Tensor& x) {
  std::vector<int64_t> s(x.sizes().begin(), x.sizes().end() - 1);
  s.push_back(3);
  return s;
}

k::PolyNormArgs base_args(const at::Tensor& x, const at::Tensor& w, at::ScalarType wt) {
  k::PolyNormArgs p{};
  p.x = x.data_ptr();
  p.w = w.data_ptr();
  p.cols = x.size(-1);
  p.rows = x.numel() / p.cols;
  p.dtype = to_kernel_dtype(x.scalar_type(), "x");
  p.wdtype = to_kernel_dtype(wt, "weight");
  return p;
}

Pair poly_norm_fwd_cuda(const at::Tensor& X, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  check_poly_norm_inputs(X, weight, bias, /*cuda=*/true);
  const c10::cuda::CUDAGuard guard(X.device());
  const at::ScalarType wt = param_work_dtype(X, weight);
  const at::Tensor x = X.contiguous(), w = weight.to(wt).contiguous(), b = bias.to(wt).contiguous();
  at::Tensor y = at::empty(X.sizes(), X.options());
  at::Tensor rstd = at::empty(rstd_shape(X), X.options().dtype(at::kFloat));
  k::PolyNormArgs p = base_args(x, w, wt);
  p.b = b.data_ptr();
  p.rstd = rstd.data_ptr<float>();
  p.out = y.data_ptr();
  p.eps = static_cast<float>(eps);
  const bool aligned = aligned_16B(p.x) && aligned_16B(p.out);
  const k::PolyNormPlan plan =
      k::plan_poly_norm(p.rows, p.cols, static_cast<int>(X.element_size()), aligned, sm_count(), false);
  LIGER_CUDA_CHECK(k::poly_norm_fwd(p, plan, at::cuda::getCurrentCUDAStream()));
  return {y, rstd};
}

Triple poly_norm_bwd_cuda(const at::Tensor& dY, const at::Tensor& X, const at::Tensor& weight,
                          const at::Tensor& bias, const at::Tensor& rstd) {
  check_poly_norm_inputs(X, weight, bias, /*cuda=*/true);
  check_poly_norm_grad(dY, X, rstd);
  const c10::cuda::CUDAGuard guard(X.device());
  const at::ScalarType wt = param_work_dtype(X, weight);
  const at::Tensor x = X.contiguous(), dy = dY.contiguous(), w = weight.to(wt).contiguous();
  const at::TensorOptions wo = weight.options().dtype(wt);
  at::Tensor dx = at::empty(X.sizes(), X.options());
  at::Tensor dw = at::empty(weight.sizes(), wo), db = at::empty(bias.sizes(), wo);
  k::PolyNormArgs p = base_args(x, w, wt);
  p.dy = dy.data_ptr();
  p.rstd = const_cast<float*>(rstd.data_ptr<float>());
  p.out = dx.data_ptr();
  p.dw = dw.data_ptr();
  p.db = db.data_ptr();
  const bool aligned = aligned_16B(p.x) && aligned_16B(p.dy) && aligned_16B(p.out);
  const k::PolyNormPlan plan =
      k::plan_poly_norm(p.rows, p.cols, static_cast<int>(X.element_size()), aligned, sm_count(), true);
  const at::Tensor ws = at::empty({plan.workspace_floats}, X.options().dtype(at::kFloat));
  p.workspace = ws.data_ptr<float>();
  LIGER_CUDA_CHECK(k::poly_norm_bwd(p, plan, at::cuda::getCurrentCUDAStream()));
  return {dx, dw.to(weight.scalar_type()), db.to(bias.scalar_type())};
}

}  // namespace poly_norm_cuda_impl

TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace poly_norm_cuda_impl;  // NOLINT(build/namespaces)

  m.impl("poly_norm_fwd", &poly_norm_fwd_cuda);
  m.impl("poly_norm_bwd", &poly_norm_bwd_cuda);
}

}  // namespace liger_cpp
