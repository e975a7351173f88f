// Autograd of liger::jsd_fwd, kl_div_fwd and tvd_fwd in C++ (the Autograd dispatch key): the
// forward computes the input's gradient for grad_output 1 and the backward scales it (in place,
// element-wise for reduction none) and hands it out (csrc/aten/autograd/forward_grads.h). Only the
// first argument (the input / p) gets a gradient, as Liger's.
#include <ATen/ATen.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "aten/autograd/forward_grads.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace divergence_autograd_impl {

using Opt = std::optional<at::Tensor>;
using Pair = std::tuple<at::Tensor, at::Tensor>;

// All three: (x, y, ..., compute_grad at argument 5) -> (loss, dx).
const fwdgrad::OpSpec& spec_of(const char* name, bool elementwise) {
  return *new fwdgrad::OpSpec{name, &fwdgrad::find_schema(name), {1, 1, 1}, {5, -1, -1}, {0, 1}, elementwise};
}

Pair finish(fwdgrad::Call& call, const at::Tensor& x) {
  const std::vector<c10::IValue> o = fwdgrad::apply(call, x, std::nullopt, std::nullopt);
  return {o[0].toTensor(), o[1].toTensor()};
}

Pair jsd_autograd(const at::Tensor& input, const at::Tensor& target, const Opt& shift_labels, double beta,
                  int64_t ignore_index, bool compute_grad) {
  static const fwdgrad::OpSpec& s = spec_of("liger::jsd_fwd", false);
  fwdgrad::Call call{
      &s, c10::impl::boxArgs(input, target, shift_labels, beta, ignore_index, compute_grad), {}};
  return finish(call, input);
}

Pair kl_div_autograd(const at::Tensor& input, const at::Tensor& target, c10::string_view reduction,
                     bool log_target, double eps, bool compute_grad) {
  static const fwdgrad::OpSpec& s = spec_of("liger::kl_div_fwd", true);
  fwdgrad::Call call{&s, c10::impl::boxArgs(input, target, reduction, log_target, eps, compute_grad), {}};
  return finish(call, input);
}

Pair tvd_autograd(const at::Tensor& p, const at::Tensor& q, const Opt& shift_labels,
                  c10::string_view reduction, int64_t ignore_index, bool compute_grad) {
  static const fwdgrad::OpSpec& s = spec_of("liger::tvd_fwd", true);
  fwdgrad::Call call{&s, c10::impl::boxArgs(p, q, shift_labels, reduction, ignore_index, compute_grad), {}};
  return finish(call, p);
}

}  // namespace divergence_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace divergence_autograd_impl;  // NOLINT(build/namespaces)

  m.impl("jsd_fwd", &jsd_autograd);
  m.impl("kl_div_fwd", &kl_div_autograd);
  m.impl("tvd_fwd", &tvd_autograd);
}

}  // namespace liger_cpp
