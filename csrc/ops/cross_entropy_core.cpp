// Device dispatch of the cross-entropy row step (csrc/host/cross_entropy_core.h).
#include "../host/cross_entropy_core.h"

#include "../host/common.h"

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
