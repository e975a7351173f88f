// Autograd for liger::swiglu_fwd and liger::geglu_fwd (C++ on the Autograd key: why and the
// pattern in autograd_common.h).
//
// Saved: a and b (the activation is recomputed in the backward). One *_bwd call gives da and db.
// in_place=True: da and db are written into a and b through *_bwd_ (declared mutations: their
// version counters record the write, so another user of a or b saved for backward raises instead
// of reading overwritten values), and only when that cannot be seen elsewhere: a and b are
// intermediates autograd owns (require grad, have a grad_fn: never a leaf such as a parameter),
// contiguous, of one dtype, in separate memory, and not traced.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <string>
#include <tuple>

#include "aten/autograd/autograd_common.h"
#include "aten/glu_ops.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace glu_autograd_impl {

using namespace autograd;  // NOLINT(build/namespaces)
using Pair = std::tuple<at::Tensor, at::Tensor>;

// approximate: std::nullopt for SwiGLU, GeGLU's approximation otherwise (glu_ops' nullptr / string).
const char* approx(const std::optional<std::string>& approximate) {
  return approximate ? approximate->c_str() : nullptr;
}

// Whether the backward may overwrite a and b (see the file comment; owned is checked in forward).
bool may_write_inputs(const at::Tensor& a, const at::Tensor& b) {
  if (tracing(a) || tracing(b) || a.scalar_type() != b.scalar_type()) return false;
  if (!(a.is_contiguous() && b.is_contiguous())) return false;
  const auto a0 = reinterpret_cast<uintptr_t>(a.data_ptr()), b0 = reinterpret_cast<uintptr_t>(b.data_ptr());
  const auto na = static_cast<uintptr_t>(a.numel() * a.element_size());
  const auto nb = static_cast<uintptr_t>(b.numel() * b.element_size());
  return a0 + na <= b0 || b0 + nb <= a0;
}

struct GluFunction : public torch::autograd::Function<GluFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b,
                               std::optional<std::string> approximate, bool in_place) {
    at::Tensor c = glu_ops::fwd(a, b, approx(approximate), in_place);
    ctx->save_for_backward({a, b});
    if (approximate) ctx->saved_data["approximate"] = *approximate;
    // Only intermediates autograd owns (never a leaf such as a parameter, never a tensor that
    // does not require a gradient) are ever written.
    const auto owned = [](const at::Tensor& t) { return t.requires_grad() && t.grad_fn() != nullptr; };
    ctx->saved_data["in_place"] = in_place && owned(a) && owned(b);
    return {c};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(4);  // a, b, approximate, in_place
    const bool need_a = ctx->needs_input_grad(0), need_b = ctx->needs_input_grad(1);
    if (!grads[0].defined() || !(need_a || need_b)) return out;
    variable_list saved = ctx->get_saved_variables();
    at::Tensor &a = saved[0], &b = saved[1];
    std::optional<std::string> approximate;
    const auto it = ctx->saved_data.find("approximate");
    if (it != ctx->saved_data.end()) approximate = it->second.toStringRef();
    const at::Tensor dc = grad_as(grads[0], a.scalar_type());
    at::Tensor da, db;
    if (ctx->saved_data["in_place"].toBool() && may_write_inputs(a, b)) {
      glu_ops::bwd_inplace(dc, a, b, approx(approximate));
      da = a.detach();
      db = b.detach();
    } else {
      std::tie(da, db) = glu_ops::bwd(dc, a, b, approx(approximate));
    }
    if (need_a) out[0] = std::move(da);
    if (need_b) out[1] = std::move(db);
    return once_differentiable(std::move(out), approximate ? "geglu" : "swiglu", {grads[0]});
  }
};

at::Tensor swiglu_fwd_autograd(const at::Tensor& a, const at::Tensor& b, bool in_place) {
  if (!any_requires_grad(a, b)) return glu_ops::fwd(a, b, nullptr, in_place);
  return GluFunction::apply(a, b, std::nullopt, in_place)[0];
}

at::Tensor geglu_fwd_autograd(const at::Tensor& a, const at::Tensor& b, c10::string_view approximate,
                              bool in_place) {
  std::optional<std::string> given(std::string(approximate.data(), approximate.size()));
  if (!any_requires_grad(a, b)) return glu_ops::fwd(a, b, given->c_str(), in_place);
  return GluFunction::apply(a, b, std::move(given), in_place)[0];
}

}  // namespace glu_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace glu_autograd_impl;  // NOLINT(build/namespaces)

  m.impl("swiglu_fwd", &swiglu_fwd_autograd);
  m.impl("geglu_fwd", &geglu_fwd_autograd);
}

}  // namespace liger_cpp
