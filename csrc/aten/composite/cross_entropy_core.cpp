// Device dispatch of the cross-entropy row step (csrc/aten/checks/cross_entropy_core.h).
#include "aten/checks/cross_entropy_core.h"

#include "aten/checks/common.h"

namespace liger_cpp {

void ce_rows(const CeRows& a) {
  if (a.logits.is_cuda()) {
#ifdef LIGER_CPP_WITH_CUDA
    ce_rows_cuda(a);
    return;
#else
    LIGER_FAIL("argument 'logits' is on ", a.logits.device(), ", but this build has no CUDA kernels");
#endif
  }
  ce_rows_cpu(a);
}

void ce_scale_rows_(const at::Tensor& d, const at::Tensor& g) {
  if (d.is_cuda()) {
#ifdef LIGER_CPP_WITH_CUDA
    ce_scale_rows_cuda_(d, g);
    return;
#else
    LIGER_FAIL("argument 'grad' is on ", d.device(), ", but this build has no CUDA kernels");
#endif
  }
  ce_scale_rows_cpu_(d, g);
}

at::Tensor ce_prologue(const at::Tensor& target, const at::Tensor& weight, int64_t V, int64_t ignore_index,
                       Reduction reduction) {
  if (target.is_cuda()) {
#ifdef LIGER_CPP_WITH_CUDA
    return ce_prologue_cuda(target, weight, V, ignore_index, reduction);
#else
    LIGER_FAIL("argument 'target' is on ", target.device(), ", but this build has no CUDA kernels");
#endif
  }
  check_ce_target_values(target, V, ignore_index);
  auto [ce_scale, z_scale] = ce_reduction_scales(target, weight, ignore_index, reduction);
  const at::Tensor wsum = weight.defined() ? weight.sum().reshape({1}) : at::zeros({1}, ce_scale.options());
  return at::cat({ce_scale, z_scale, wsum});
}

std::pair<at::Tensor, at::Tensor> ce_reduce_rows(const at::Tensor& loss_rows, const at::Tensor& z_rows,
                                                 const at::Tensor& scales) {
  if (loss_rows.is_cuda()) {
#ifdef LIGER_CPP_WITH_CUDA
    return ce_reduce_rows_cuda(loss_rows, z_rows, scales);
#else
    LIGER_FAIL("argument 'loss' is on ", loss_rows.device(), ", but this build has no CUDA kernels");
#endif
  }
  at::Tensor loss = (loss_rows.sum() * scales[0]).reshape({});
  at::Tensor z = z_rows.defined() ? (z_rows.sum() * scales[1]).reshape({}) : at::zeros({}, loss.options());
  if (z_rows.defined()) loss = loss + z;
  return {loss, z};
}

}  // namespace liger_cpp

namespace liger_cpp {

Reduction parse_reduction(std::string_view reduction) {
  if (reduction == "none") return Reduction::kNone;
  if (reduction == "mean") return Reduction::kMean;
  if (reduction == "sum") return Reduction::kSum;
  LIGER_FAIL("argument 'reduction': expected 'none', 'mean' or 'sum', got '", reduction, "'");
}

void check_ce_target_values(const at::Tensor& target, int64_t V, int64_t ignore_index) {
  if (target.numel() == 0) return;
  const at::Tensor bad = ((target < 0) | (target >= V)) & (target != ignore_index);
  if (target.is_cuda()) {
    at::_assert_async(bad.any().logical_not(),
                      "liger_cpp: argument 'target': every value must be ignore_index or in [0, V)");
    return;
  }
  const at::Tensor pos = bad.nonzero();
  if (pos.size(0) > 0) {
    const int64_t i = pos[0][0].item<int64_t>();
    LIGER_FAIL("argument 'target': expected values in [0, ", V, ") or ignore_index (", ignore_index,
               "), got ", target[i].item<int64_t>(), " at position ", i);
  }
}

std::pair<at::Tensor, at::Tensor> ce_reduction_scales(const at::Tensor& target, const at::Tensor& weight,
                                                      int64_t ignore_index, Reduction reduction) {
  const auto f32 = target.options().dtype(at::kFloat);
  if (reduction != Reduction::kMean) {
    const at::Tensor one = at::ones({1}, f32);
    return {one, one};
  }
  const at::Tensor valid = target != ignore_index;
  const at::Tensor n = valid.sum().to(at::kFloat).reshape({1});
  const at::Tensor zero = at::zeros({1}, f32);
  const at::Tensor z_scale = at::where(n > 0, n.reciprocal(), zero);
  if (!weight.defined()) return {z_scale, z_scale};
  // sum of w[y] over valid rows; ignored rows index class 0 and are masked out.
  const at::Tensor safe = at::where(valid, target, at::zeros_like(target)).clamp(0, weight.size(0) - 1);
  const at::Tensor wsum = (weight.index_select(0, safe) * valid.to(at::kFloat)).sum().reshape({1});
  const at::Tensor ce_scale = at::where(wsum != 0, wsum.reciprocal(), zero);
  return {ce_scale, z_scale};
}

}  // namespace liger_cpp

// ---- liger::_ce_rows: the row step as an op, for tests and benchmarks of the kernels themselves ----
#include <torch/library.h>

namespace liger_cpp {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> ce_rows_op(
    const at::Tensor& logits, const at::Tensor& target, const c10::optional<at::Tensor>& weight,
    const at::Tensor& ce_scale, const at::Tensor& z_scale, int64_t ignore_index, double label_smoothing,
    double lse_square_scale, double softcap, bool compute_grad) {
  LIGER_CHECK_ARG(logits.dim() == 2 && logits.stride(1) == 1, "logits",
                  "expected a 2-D tensor with a unit last stride, got shape ", shape_str(logits));
  LIGER_CHECK_ARG(target.dim() == 1 && target.size(0) == logits.size(0) && target.scalar_type() == at::kLong,
                  "target", "expected int64 of shape (", logits.size(0), ",), got ", shape_str(target));
  for (const at::Tensor* t : {&ce_scale, &z_scale})
    LIGER_CHECK_ARG(t->scalar_type() == at::kFloat && t->is_contiguous() &&
                        (t->numel() == 1 || t->numel() == logits.size(0)),
                    t == &ce_scale ? "ce_scale" : "z_scale", "expected float32 with 1 or rows elements");
  CeRows c;
  c.logits = logits;
  c.target = target.contiguous();
  if (weight.has_value() && weight->defined()) c.weight = weight->to(at::kFloat).contiguous();
  const auto f32 = logits.options().dtype(at::kFloat);
  c.loss = at::empty({logits.size(0)}, f32);
  c.z_loss = at::empty({logits.size(0)}, f32);
  c.argmax = at::empty({logits.size(0)}, logits.options().dtype(at::kLong));
  c.dlogits = compute_grad ? at::empty_like(logits, at::MemoryFormat::Contiguous) : at::Tensor();
  c.ce_scale = ce_scale;
  c.z_scale = z_scale;
  c.ignore_index = ignore_index;
  c.label_smoothing = label_smoothing;
  c.lse_square_scale = lse_square_scale;
  c.softcap = softcap;
  ce_rows(c);
  return {c.loss, c.z_loss, c.argmax, compute_grad ? c.dlogits : at::empty({0}, logits.options())};
}

}  // namespace

TORCH_LIBRARY_IMPL(liger, CPU, m) { m.impl("_ce_rows", &ce_rows_op); }
#ifdef LIGER_CPP_WITH_CUDA
TORCH_LIBRARY_IMPL(liger, CUDA, m) { m.impl("_ce_rows", &ce_rows_op); }
#endif

}  // namespace liger_cpp
