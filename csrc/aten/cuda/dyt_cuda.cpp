// DyT CUDA host wrapper: checks, device guard, current stream, the parameters in their working
// dtype, one plan, then the ATen-free launchers (csrc/kernels/dyt/dyt.h).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <tuple>

#include "aten/checks/dyt_checks.h"
#include "aten/cuda/cuda_common.h"
#include "kernels/dyt/dyt.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace dyt_cuda_impl {

namespace k = kernels;
using Opt = std::optional<at::Tensor>;
using Quad = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// x's row matrix: rows = every leading dimension, cols = the last.
k::DytArgs base_args(const at::Tensor& x, const at::Tensor& a, const at::Tensor& g, at::ScalarType wt) {
  k::DytArgs p{};
  p.x = x.data_ptr();
  p.alpha = a.data_ptr();
  p.gamma = g.data_ptr();
  p.cols = x.size(-1);
  p.rows = p.cols > 0 ? x.numel() / p.cols : 0;
  p.dtype = to_kernel_dtype(x.scalar_type(), "x");
  p.wdtype = to_kernel_dtype(wt, "gamma");
  return p;
}

at::Tensor dyt_fwd_cuda(const at::Tensor& X, const at::Tensor& alpha, const at::Tensor& gamma,
                        const Opt& beta) {
  check_dyt_inputs(X, alpha, gamma, beta, /*cuda=*/true);
  const c10::cuda::CUDAGuard guard(X.device());
  const at::ScalarType wt = param_work_dtype(X, gamma);
  const at::Tensor x = X.contiguous(), a = alpha.to(wt).contiguous();
  // The vectorised forward reads gamma / beta a vector (16 / x's element size elements) at a time:
  // a parameter that is a view at another offset is copied (cols elements) to aligned memory.
  const int64_t palign = (16 / X.element_size()) * c10::elementSize(wt);
  auto aligned_param = [&](const at::Tensor& t) {
    at::Tensor c = t.to(wt).contiguous();
    return reinterpret_cast<std::uintptr_t>(c.data_ptr()) % palign == 0 ? c : c.clone();
  };
  const at::Tensor g = aligned_param(gamma);
  const bool has_beta = beta.has_value() && beta->defined();
  const at::Tensor b = has_beta ? aligned_param(*beta) : at::Tensor();
  at::Tensor y = at::empty(X.sizes(), X.options());
  k::DytArgs p = base_args(x, a, g, wt);
  p.beta = has_beta ? b.data_ptr() : nullptr;
  p.out = y.data_ptr();
  const bool aligned = aligned_16B(p.x) && aligned_16B(p.out);
  const k::DytPlan plan =
      k::plan_dyt(p.rows, p.cols, static_cast<int>(X.element_size()), aligned, sm_count(), false);
  LIGER_CUDA_CHECK(k::dyt_fwd(p, plan, at::cuda::getCurrentCUDAStream()));
  return y;
}

Quad dyt_bwd_cuda(const at::Tensor& dY, const at::Tensor& X, const at::Tensor& alpha, const at::Tensor& gamma,
                  const Opt& beta) {
  check_dyt_inputs(X, alpha, gamma, beta, /*cuda=*/true);
  check_grad_like(dY, X);
  const c10::cuda::CUDAGuard guard(X.device());
  const at::ScalarType wt = param_work_dtype(X, gamma);
  const at::Tensor x = X.contiguous(), dy = dY.contiguous(), a = alpha.to(wt).contiguous(),
                   g = gamma.to(wt).contiguous();
  const at::TensorOptions wo = gamma.options().dtype(wt);
  at::Tensor dx = at::empty(X.sizes(), X.options());
  at::Tensor dalpha = at::empty(alpha.sizes(), wo), dgamma = at::empty(gamma.sizes(), wo),
             dbeta = at::empty(gamma.sizes(), wo);
  k::DytArgs p = base_args(x, a, g, wt);
  p.dy = dy.data_ptr();
  p.out = dx.data_ptr();
  p.dalpha = dalpha.data_ptr();
  p.dgamma = dgamma.data_ptr();
  p.dbeta = dbeta.data_ptr();
  const bool aligned = aligned_16B(p.x) && aligned_16B(p.dy) && aligned_16B(p.out);
  const k::DytPlan plan =
      k::plan_dyt(p.rows, p.cols, static_cast<int>(X.element_size()), aligned, sm_count(), true);
  const at::Tensor ws = at::empty({plan.workspace_floats}, X.options().dtype(at::kFloat));
  p.workspace = ws.data_ptr<float>();
  LIGER_CUDA_CHECK(k::dyt_bwd(p, plan, at::cuda::getCurrentCUDAStream()));
  const bool has_beta = beta.has_value() && beta->defined();
  return {dx, dalpha.to(alpha.scalar_type()), dgamma.to(gamma.scalar_type()),
          dbeta.to(has_beta ? beta->scalar_type() : gamma.scalar_type())};
}

}  // namespace dyt_cuda_impl

TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace dyt_cuda_impl;  // NOLINT(build/namespaces)

  m.impl("dyt_fwd", &dyt_fwd_cuda);
  m.impl("dyt_bwd", &dyt_bwd_cuda);
}

}  // namespace liger_cpp
