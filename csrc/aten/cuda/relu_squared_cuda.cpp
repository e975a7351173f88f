// ReLU squared CUDA host wrapper: checks, device guard, current stream, dtype mapping, then the
// ATen-free launchers (csrc/kernels/activation/relu_squared.h).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "aten/checks/relu_squared_checks.h"
#include "aten/cuda/cuda_common.h"
#include "kernels/activation/relu_squared.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace relu_squared_cuda_impl {

namespace k = kernels;

at::Tensor relu_squared_fwd_cuda(const at::Tensor& X) {
  check_relu_squared_input(X, /*cuda=*/true);
  const c10::cuda::CUDAGuard guard(X.device());
  const at::Tensor x = X.contiguous();
  at::Tensor y = at::empty(X.sizes(), X.options());
  k::ReluSquaredArgs p{};
  p.x = x.data_ptr();
  p.dy = nullptr;
  p.out = y.data_ptr();
  p.n = x.numel();
  p.dtype = to_kernel_dtype(X.scalar_type(), "x");
  LIGER_CUDA_CHECK(k::relu_squared_fwd(p, sm_count(), at::cuda::getCurrentCUDAStream()));
  return y;
}

at::Tensor relu_squared_bwd_cuda(const at::Tensor& dY, const at::Tensor& X) {
  check_relu_squared_bwd(dY, X, /*cuda=*/true);
  const c10::cuda::CUDAGuard guard(X.device());
  const at::Tensor x = X.contiguous(), g = dY.contiguous();
  at::Tensor dx = at::empty(X.sizes(), X.options());
  k::ReluSquaredArgs p{};
  p.x = x.data_ptr();
  p.dy = g.data_ptr();
  p.out = dx.data_ptr();
  p.n = x.numel();
  p.dtype = to_kernel_dtype(X.scalar_type(), "x");
  LIGER_CUDA_CHECK(k::relu_squared_bwd(p, sm_count(), at::cuda::getCurrentCUDAStream()));
  return dx;
}

}  // namespace relu_squared_cuda_impl

TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace relu_squared_cuda_impl;  // NOLINT(build/namespaces)

  m.impl("relu_squared_fwd", &relu_squared_fwd_cuda);
  m.impl("relu_squared_bwd", &relu_squared_bwd_cuda);
}

}  // namespace liger_cpp
