// Divergences of given distributions (Liger's LigerJSD, LigerKLDIVLoss, LigerTVDLoss): one pass
// of the element-wise kernel (csrc/kernels/divergence/divergence.h) writes the row sums (or every
// element's loss for reduction none) and the gradient for grad_output 1, already scaled by the
// reduction's normaliser; the normaliser (the rows whose label is not ignore_index) stays a device
// tensor: no host synchronisation on CUDA. Formulas: the schema (csrc/schema.cpp).
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <string>
#include <tuple>

#include "aten/checks/common.h"
#include "aten/checks/divergence_core.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace divergence_impl {

enum class Red { kNone, kSum, kMean, kBatchMean };

Red parse_red(c10::string_view r) {
  const std::string_view s(r.data(), r.size());
  if (s == "none") return Red::kNone;
  if (s == "sum") return Red::kSum;
  if (s == "mean") return Red::kMean;
  if (s == "batchmean") return Red::kBatchMean;
  LIGER_FAIL("argument 'reduction': expected 'none', 'sum', 'mean' or 'batchmean', got '", s, "'");
}

struct Rows {
  at::Tensor x, y, labels;
  int64_t rows = 0, V = 0;
};

Rows prepare(const at::Tensor& x, const at::Tensor& y, const std::optional<at::Tensor>& labels,
             const char* xname, const char* yname) {
  const bool cuda = x.is_cuda();
  LIGER_CHECK_ARG(x.dim() >= 1 && x.size(-1) > 0, xname, "expected shape (..., V) with V > 0, got ",
                  shape_str(x));
  LIGER_CHECK_ARG(is_float_type(x.scalar_type(), !cuda), xname, "expected float32, float16 or bfloat16",
                  cuda ? "" : " (or float64 on CPU)", ", got ", dtype_str(x.scalar_type()));
  LIGER_CHECK_ARG(y.sizes() == x.sizes(), yname, "expected ", xname, "'s shape ", shape_str(x), ", got ",
                  shape_str(y));
  LIGER_CHECK_ARG(y.device() == x.device() && y.scalar_type() == x.scalar_type(), yname, "expected ", xname,
                  "'s device and dtype (", dtype_str(x.scalar_type()), "), got ", y.device(), " ",
                  dtype_str(y.scalar_type()));
  Rows r;
  r.x = as_rows(x);
  r.y = as_rows(y);
  r.V = x.size(-1);
  r.rows = r.x.size(0);
  if (labels.has_value() && labels->defined()) {
    LIGER_CHECK_ARG(labels->numel() == r.rows, "shift_labels", "expected ", r.rows,
                    " elements (one per row of ", xname, "), got shape ", shape_str(*labels));
    check_index_dtype(*labels, "shift_labels", "labels");
    LIGER_CHECK_ARG(labels->device() == x.device(), "shift_labels", "expected device ", x.device(), ", got ",
                    labels->device());
    r.labels = labels->reshape({r.rows}).to(at::kLong).contiguous();
  }
  return r;
}

// The rows that count (labels != ignore_index, or all), as a float32 () device tensor.
at::Tensor counted(const Rows& r, int64_t ignore_index) {
  if (r.labels.defined()) return (r.labels != ignore_index).sum().to(at::kFloat);
  return at::full({}, static_cast<double>(r.rows), r.x.options().dtype(at::kFloat));
}

// 1 / d, 0 where d is 0 (an all-ignored batch gives loss 0 and a zero gradient, not NaN).
at::Tensor inv_or_zero(const at::Tensor& d) {
  return at::where(d > 0, d.clamp_min(1e-30).reciprocal(), at::zeros_like(d)).reshape({1}).contiguous();
}

std::tuple<at::Tensor, at::Tensor> run(const Rows& r, const at::Tensor& like, DivKind kind, bool none,
                                       const at::Tensor& scale, bool compute_grad, double beta, double eps,
                                       bool log_target, int64_t ignore_index) {
  const c10::DeviceGuard guard(like.device());
  const auto f32 = like.options().dtype(at::kFloat);
  PointwiseDiv p;
  p.x = r.x;
  p.y = r.y;
  p.labels = r.labels;
  p.kind = kind;
  p.beta = beta;
  p.eps = eps;
  p.log_target = log_target;
  p.ignore_index = ignore_index;
  if (none)
    p.loss_elems = at::empty({r.rows, r.V}, f32);
  else
    p.loss_rows = at::empty({r.rows}, f32);
  at::Tensor grad = at::empty({0}, like.options());
  if (compute_grad) {
    grad = at::empty({r.rows, r.V}, like.options());
    p.grad = grad;
    p.grad_scale = none ? at::ones({1}, f32) : scale;
  }
  pointwise_div(p);
  at::Tensor loss = none ? p.loss_elems.view(like.sizes()) : (p.loss_rows.sum() * scale).reshape({});
  return {loss, compute_grad ? grad.view(like.sizes()) : grad};
}

std::tuple<at::Tensor, at::Tensor> jsd_fwd(const at::Tensor& input, const at::Tensor& target,
                                           const std::optional<at::Tensor>& shift_labels, double beta,
                                           int64_t ignore_index, bool compute_grad) {
  LIGER_CHECK_ARG(std::isfinite(beta) && beta >= 0.0 && beta <= 1.0, "beta",
                  "expected a value in [0, 1], got ", beta);
  const Rows r = prepare(input, target, shift_labels, "input", "target");
  const at::Tensor scale = inv_or_zero(counted(r, ignore_index));
  return run(r, input, DivKind::kJsd, false, scale, compute_grad, beta, 0.0, false, ignore_index);
}

std::tuple<at::Tensor, at::Tensor> kl_div_fwd(const at::Tensor& input, const at::Tensor& target,
                                              c10::string_view reduction, bool log_target, double eps,
                                              bool compute_grad) {
  const Red red = parse_red(reduction);
  const Rows r = prepare(input, target, std::nullopt, "input", "target");
  // PyTorch's normalisers: mean over every element, batchmean over the first dimension.
  double d = 1.0;
  if (red == Red::kMean) d = static_cast<double>(input.numel());
  if (red == Red::kBatchMean) d = static_cast<double>(input.dim() > 0 ? input.size(0) : 1);
  const at::Tensor scale = at::full({1}, d > 0 ? 1.0 / d : 0.0, input.options().dtype(at::kFloat));
  return run(r, input, DivKind::kKl, red == Red::kNone, scale, compute_grad, 0.0, eps, log_target, -100);
}

std::tuple<at::Tensor, at::Tensor> tvd_fwd(const at::Tensor& p, const at::Tensor& q,
                                           const std::optional<at::Tensor>& shift_labels,
                                           c10::string_view reduction, int64_t ignore_index,
                                           bool compute_grad) {
  const Red red = parse_red(reduction);
  const Rows r = prepare(p, q, shift_labels, "p", "q");
  const at::Tensor n = counted(r, ignore_index);
  at::Tensor scale = at::ones({1}, p.options().dtype(at::kFloat));
  if (red == Red::kBatchMean) scale = inv_or_zero(n);
  if (red == Red::kMean) scale = inv_or_zero(n * static_cast<double>(r.V));
  return run(r, p, DivKind::kTvd, red == Red::kNone, scale, compute_grad, 0.0, 0.0, false, ignore_index);
}

}  // namespace divergence_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace divergence_impl;  // NOLINT(build/namespaces)

  m.impl("jsd_fwd", &jsd_fwd);
  m.impl("kl_div_fwd", &kl_div_fwd);
  m.impl("tvd_fwd", &tvd_fwd);
}

#ifdef LIGER_CPP_WITH_CUDA
TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace divergence_impl;  // NOLINT(build/namespaces)

  m.impl("jsd_fwd", &jsd_fwd);
  m.impl("kl_div_fwd", &kl_div_fwd);
  m.impl("tvd_fwd", &tvd_fwd);
}
#endif

}  // namespace liger_cpp
