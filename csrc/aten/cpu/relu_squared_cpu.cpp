// ReLU squared on the CPU: the CUDA kernels' math (csrc/kernels/activation/relu_squared.h) in an
// element-wise loop with at::parallel_for; float32 math (float64 for float64), one rounding.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <type_traits>

#include "aten/checks/relu_squared_checks.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace relu_squared_cpu_impl {

constexpr int64_t kGrain = 1 << 15;

template <typename T>
using acc_of = std::conditional_t<std::is_same_v<T, double>, double, float>;

at::Tensor relu_squared_fwd_cpu(const at::Tensor& X) {
  check_relu_squared_input(X, /*cuda=*/false);
  const at::Tensor x = X.contiguous();
  at::Tensor y = at::empty(X.sizes(), X.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, X.scalar_type(), "relu_squared_fwd_cpu", [&] {
    using acc_t = acc_of<scalar_t>;
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const acc_t v = static_cast<acc_t>(xp[i]);
        const acc_t r = v > acc_t(0) ? v : acc_t(0);
        yp[i] = static_cast<scalar_t>(r * r);
      }
    });
  });
  return y;
}

at::Tensor relu_squared_bwd_cpu(const at::Tensor& dY, const at::Tensor& X) {
  check_relu_squared_bwd(dY, X, /*cuda=*/false);
  const at::Tensor x = X.contiguous(), g = dY.contiguous();
  at::Tensor dx = at::empty(X.sizes(), X.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, X.scalar_type(), "relu_squared_bwd_cpu", [&] {
    using acc_t = acc_of<scalar_t>;
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* gp = g.data_ptr<scalar_t>();
    scalar_t* dp = dx.data_ptr<scalar_t>();
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const acc_t v = static_cast<acc_t>(xp[i]);
        const acc_t r = v > acc_t(0) ? v : acc_t(0);
        dp[i] = static_cast<scalar_t>(static_cast<acc_t>(gp[i]) * (acc_t(2) * r));
      }
    });
  });
  return dx;
}

}  // namespace relu_squared_cpu_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace relu_squared_cpu_impl;  // NOLINT(build/namespaces)

  m.impl("relu_squared_fwd", &relu_squared_fwd_cpu);
  m.impl("relu_squared_bwd", &relu_squared_bwd_cpu);
}

}  // namespace liger_cpp
