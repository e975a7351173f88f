// liger::cross_entropy_fwd, cross_entropy_fwd_ and cross_entropy_scale_grad_
// (schemas and math: csrc/schema.cpp, csrc/aten/checks/cross_entropy_core.h).
// Device-generic: argument checks, the reduction scales and the reductions are
// ATen calls on the logits' device; the row step dispatches to the CPU or CUDA
// implementation. Nothing here synchronises with the host on CUDA (valid-target
// counts stay on the device; target values are checked with an asynchronous
// device assertion), so the ops can be captured in a CUDA graph.
#include <ATen/MemoryOverlap.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <string_view>
#include <tuple>

#include "aten/checks/common.h"
#include "aten/checks/cross_entropy_core.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace cross_entropy_impl {

// target as a flat contiguous int64 tensor (itself when it already is one: no ATen round trip).
at::Tensor flat_long(const at::Tensor& target) {
  if (target.dim() == 1 && target.scalar_type() == at::kLong && target.is_contiguous()) return target;
  return target.reshape({-1}).to(at::kLong).contiguous();
}

// Inputs after checking and normalising: logits as rows, flat int64 target,
// float32 weight (or undefined).
struct CeInputs {
  at::Tensor rows;    // [rows, V], unit column stride
  at::Tensor target;  // [rows] int64 contiguous
  at::Tensor weight;  // [V] float32 contiguous or undefined
  Reduction reduction = Reduction::kMean;
};

CeInputs prepare(const at::Tensor& logits, const at::Tensor& target, const c10::optional<at::Tensor>& weight,
                 double label_smoothing, double lse_square_scale, double softcap, std::string_view reduction,
                 const char* logits_name) {
  CeInputs in;
  in.reduction = parse_reduction(reduction);
  LIGER_CHECK_ARG(logits.defined() && logits.dim() >= 1, logits_name,
                  "expected a tensor of shape (..., V) with at least 1 dimension, got a scalar");
  const bool cuda = logits.is_cuda();
  LIGER_CHECK_ARG(cuda || logits.is_cpu(), logits_name, "expected a CPU or CUDA tensor, got device ",
                  logits.device());
  LIGER_CHECK_ARG(is_float_type(logits.scalar_type(), !cuda), logits_name,
                  "expected float32, float16 or bfloat16", cuda ? "" : " (or float64 on CPU)", ", got ",
                  dtype_str(logits.scalar_type()));
  const int64_t V = logits.size(-1);
  LIGER_CHECK_ARG(V > 0, logits_name, "expected a non-empty class (last) dimension, got shape ",
                  shape_str(logits));
  LIGER_CHECK_ARG(V == 1 || logits.stride(-1) == 1, logits_name,
                  "expected a unit stride in the class (last) dimension, got strides ", logits.strides());

  LIGER_CHECK_ARG(target.defined(), "target", "expected a tensor, got None");
  check_index_dtype(target, "target", "class indices");
  // The class dimension is the last one at every rank (Liger's (BT, V), generalised); a target
  // shaped for F.cross_entropy's (N, C, d1, ...) layout (classes in dimension 1) fails here.
  LIGER_CHECK_ARG(
      target.sizes() == logits.sizes().slice(0, logits.dim() - 1), "target", "expected shape ",
      logits.sizes().slice(0, logits.dim() - 1),
      " (the logits' shape without the class dimension, which is the last one",
      logits.dim() >= 3
          ? "; for F.cross_entropy's (N, C, d1, ...) layout pass logits.movedim(1, -1).contiguous()"
          : "",
      "), got ", shape_str(target));
  LIGER_CHECK_ARG(target.device() == logits.device(), "target", "expected device ", logits.device(),
                  " (the logits'), got ", target.device());

  if (weight.has_value() && weight->defined()) {
    const at::Tensor& w = *weight;
    LIGER_CHECK_ARG(w.dim() == 1 && w.size(0) == V, "weight", "expected shape (", V,
                    ",) (one weight per class), got ", shape_str(w));
    LIGER_CHECK_ARG(w.device() == logits.device(), "weight", "expected device ", logits.device(),
                    " (the logits'), got ", w.device());
    LIGER_CHECK_ARG(is_float_type(w.scalar_type(), true), "weight", "expected a floating-point tensor, got ",
                    dtype_str(w.scalar_type()));
    in.weight = w.to(at::kFloat).contiguous();
  }
  // The negated comparisons also reject NaN.
  LIGER_CHECK_ARG(label_smoothing >= 0.0 && label_smoothing <= 1.0, "label_smoothing",
                  "expected a value in [0, 1], got ", label_smoothing);
  LIGER_CHECK_ARG(lse_square_scale >= 0.0 && std::isfinite(lse_square_scale), "lse_square_scale",
                  "expected a finite value >= 0, got ", lse_square_scale);
  LIGER_CHECK_ARG(softcap >= 0.0 && std::isfinite(softcap), "softcap",
                  "expected a finite value >= 0 (0 or None: no softcapping), got ", softcap);

  in.rows = as_rows(logits);
  in.target = flat_long(target);
  return in;
}

// Runs the row step with gradient rows dl (undefined: no gradient) and forms
// the reduced outputs. Returns (loss, z_loss, argmax) shaped like `target`
// (reduction none) or 0-d (mean, sum); argmax is (0,) unless requested.
std::tuple<at::Tensor, at::Tensor, at::Tensor> run(const CeInputs& in, const at::Tensor& target_shape_of,
                                                   const at::Tensor& dl, int64_t ignore_index,
                                                   double label_smoothing, double lse_square_scale,
                                                   double softcap, bool return_argmax) {
  const int64_t rows = in.rows.size(0), V = in.rows.size(1);
  const auto f32 = in.rows.options().dtype(at::kFloat);
  // Target check, gradient scales and the weights' sum: one launch on CUDA.
  const at::Tensor scales = ce_prologue(in.target, in.weight, V, ignore_index, in.reduction);
  const CeScales sc = split_ce_scales(scales, in.weight.defined());

  CeRows a;
  a.logits = in.rows;
  a.target = in.target;
  a.weight = in.weight;
  a.weight_sum = sc.weight_sum;
  a.dlogits = dl;
  a.loss = small_empty({rows}, f32);
  if (lse_square_scale > 0) a.z_loss = small_empty({rows}, f32);
  if (return_argmax) a.argmax = small_empty({rows}, in.target.options());
  a.ce_scale = sc.ce;
  a.z_scale = sc.z;
  a.ignore_index = ignore_index;
  a.label_smoothing = label_smoothing;
  a.lse_square_scale = lse_square_scale;
  a.softcap = softcap;
  ce_rows(a);

  at::Tensor loss, z;
  const at::IntArrayRef shape = target_shape_of.sizes();
  switch (in.reduction) {
    case Reduction::kNone:
      z = a.z_loss.defined() ? a.z_loss.view(shape) : at::zeros(shape, f32);
      loss = a.z_loss.defined() ? a.loss.add_(a.z_loss).view(shape) : a.loss.view(shape);
      break;
    case Reduction::kMean:  // the scales are 1 for a sum
    case Reduction::kSum:
    default:
      std::tie(loss, z) = ce_reduce_rows(a.loss, a.z_loss, scales);
      break;
  }
  at::Tensor argmax = return_argmax ? a.argmax.view(shape) : small_empty({0}, in.target.options());
  return {loss, z, argmax};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> cross_entropy_fwd(
    const at::Tensor& logits, const at::Tensor& target, const c10::optional<at::Tensor>& weight,
    int64_t ignore_index, double label_smoothing, double lse_square_scale, double softcap,
    c10::string_view reduction, bool compute_grad, bool return_argmax) {
  const CeInputs in =
      prepare(logits, target, weight, label_smoothing, lse_square_scale, softcap, reduction, "logits");
  const c10::DeviceGuard guard(logits.device());
  // A fresh, contiguous gradient: the op's one logits-sized allocation.
  at::Tensor dlogits =
      compute_grad ? small_empty(logits.sizes(), logits.options()) : small_empty({0}, logits.options());
  const at::Tensor dl = !compute_grad       ? at::Tensor()
                        : logits.dim() == 2 ? dlogits
                                            : dlogits.view({in.rows.size(0), in.rows.size(1)});
  auto [loss, z, argmax] =
      run(in, target, dl, ignore_index, label_smoothing, lse_square_scale, softcap, return_argmax);
  return {loss, z, dlogits, argmax};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> cross_entropy_fwd_inplace(
    at::Tensor& logits, const at::Tensor& target, const c10::optional<at::Tensor>& weight,
    int64_t ignore_index, double label_smoothing, double lse_square_scale, double softcap,
    c10::string_view reduction, bool return_argmax) {
  const CeInputs in =
      prepare(logits, target, weight, label_smoothing, lse_square_scale, softcap, reduction, "logits");
  // The gradient must land in logits' own storage: no copy on the way.
  LIGER_CHECK_ARG(logits.numel() == 0 || (in.rows.is_alias_of(logits) &&
                                          at::has_internal_overlap(logits) != at::MemOverlap::Yes),
                  "logits",
                  "the in-place variant needs logits whose leading dimensions flatten into rows without a "
                  "copy and that do not overlap themselves; got shape ",
                  shape_str(logits), " and strides ", logits.strides());
  const c10::DeviceGuard guard(logits.device());
  auto out =
      run(in, target, in.rows, ignore_index, label_smoothing, lse_square_scale, softcap, return_argmax);
  mark_written(logits);
  return out;
}

void cross_entropy_scale_grad_inplace(at::Tensor& grad, const at::Tensor& grad_output) {
  LIGER_CHECK_ARG(grad.defined() && grad.dim() >= 1, "grad",
                  "expected a tensor of shape (..., V), got a scalar");
  const bool cuda = grad.is_cuda();
  LIGER_CHECK_ARG(cuda || grad.is_cpu(), "grad", "expected a CPU or CUDA tensor, got device ", grad.device());
  LIGER_CHECK_ARG(is_float_type(grad.scalar_type(), !cuda), "grad", "expected float32, float16 or bfloat16",
                  cuda ? "" : " (or float64 on CPU)", ", got ", dtype_str(grad.scalar_type()));
  LIGER_CHECK_ARG(grad_output.defined(), "grad_output", "expected a tensor, got None");
  LIGER_CHECK_ARG(grad_output.device() == grad.device(), "grad_output", "expected device ", grad.device(),
                  " (grad's), got ", grad_output.device());
  LIGER_CHECK_ARG(is_float_type(grad_output.scalar_type(), true), "grad_output",
                  "expected a floating-point tensor, got ", dtype_str(grad_output.scalar_type()));
  const int64_t V = grad.size(-1);
  const int64_t rows = V > 0 ? grad.numel() / V : 0;
  LIGER_CHECK_ARG(grad_output.numel() == 1 || grad_output.numel() == rows, "grad_output",
                  "expected 1 element (reduced loss) or one per row (", rows,
                  ", reduction 'none'), got shape ", shape_str(grad_output));
  if (grad.numel() == 0) {
    mark_written(grad);
    return;
  }
  LIGER_CHECK_ARG(V == 1 || grad.stride(-1) == 1, "grad",
                  "expected a unit stride in the class (last) dimension, got strides ", grad.strides());
  const at::Tensor d = as_rows(grad);
  LIGER_CHECK_ARG(
      d.is_alias_of(grad) && at::has_internal_overlap(grad) != at::MemOverlap::Yes, "grad",
      "expected leading dimensions that flatten into rows without a copy and no self-overlap; got "
      "shape ",
      shape_str(grad), " and strides ", grad.strides());
  const c10::DeviceGuard guard(grad.device());
  mark_written(grad);
  // The row scaling reads grad_output's numel() float32 values (1 or one per row), whatever its shape.
  ce_scale_rows_(
      d, (grad_output.scalar_type() == at::kFloat ? grad_output : grad_output.to(at::kFloat)).contiguous());
}

}  // namespace cross_entropy_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace cross_entropy_impl;  // NOLINT(build/namespaces)

  m.impl("cross_entropy_fwd", &cross_entropy_fwd);
  m.impl("cross_entropy_fwd_", &cross_entropy_fwd_inplace);
  m.impl("cross_entropy_scale_grad_", &cross_entropy_scale_grad_inplace);
}

#ifdef LIGER_CPP_WITH_CUDA
TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace cross_entropy_impl;  // NOLINT(build/namespaces)

  m.impl("cross_entropy_fwd", &cross_entropy_fwd);
  m.impl("cross_entropy_fwd_", &cross_entropy_fwd_inplace);
  m.impl("cross_entropy_scale_grad_", &cross_entropy_scale_grad_inplace);
}
#endif

}  // namespace liger_cpp
