// Device dispatch of the cross-entropy row step (csrc/aten/checks/cross_entropy_core.h).
#include "aten/checks/cross_entropy_core.h"

#include <atomic>
#include <string>

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
    if (check_targets_enabled()) check_ce_target_values(target, V, ignore_index);
    return ce_prologue_cuda(target, weight, V, ignore_index, reduction);
#else
    LIGER_FAIL("argument 'target': is on ", target.device(), ", but this build has no CUDA kernels");
#endif
  }
  // CPU: one pass over the targets (the check, the valid count and the weights' sums), no ATen ops:
  // at an eager call's sizes the ops' fixed costs were most of the cross entropy's host time.
  const at::Tensor t = target.contiguous();
  const int64_t* y = t.const_data_ptr<int64_t>();
  const int64_t n = t.numel();
  const float* w = weight.defined() ? weight.const_data_ptr<float>() : nullptr;
  int64_t valid = 0;
  double wy = 0;  // sum of w[y] over valid rows
  for (int64_t i = 0; i < n; ++i) {
    if (y[i] == ignore_index) continue;
    if (y[i] < 0 || y[i] >= V) fail_bad_target(V, ignore_index, y[i], i);
    ++valid;
    if (w) wy += w[y[i]];
  }
  double wsum = 0;
  if (w)
    for (int64_t j = 0; j < V; ++j) wsum += w[j];
  at::Tensor scales = small_empty({3}, target.options().dtype(at::kFloat));
  float* s = scales.data_ptr<float>();
  if (reduction == Reduction::kMean) {
    s[1] = valid > 0 ? static_cast<float>(1.0 / static_cast<double>(valid)) : 0.f;
    s[0] = !w ? s[1] : (valid > 0 && wy != 0 ? static_cast<float>(1.0 / wy) : 0.f);
  } else {
    s[0] = s[1] = 1.f;
  }
  s[2] = static_cast<float>(wsum);
  return scales;
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
  // CPU: float64 sums of the (contiguous, float32) rows, scaled and rounded once.
  const auto sum = [](const at::Tensor& r) {
    const float* p = r.const_data_ptr<float>();
    double acc = 0;
    for (int64_t i = 0, n = r.numel(); i < n; ++i) acc += p[i];
    return acc;
  };
  const float* sc = scales.const_data_ptr<float>();
  const double z = z_rows.defined() ? sum(z_rows) * sc[1] : 0.0;
  at::Tensor loss = small_empty({}, loss_rows.options());
  at::Tensor zt = small_empty({}, loss_rows.options());
  *loss.data_ptr<float>() = static_cast<float>(sum(loss_rows) * sc[0] + z);
  *zt.data_ptr<float>() = static_cast<float>(z);
  return {loss, zt};
}

}  // namespace liger_cpp

namespace liger_cpp {

Reduction parse_reduction(std::string_view reduction) {
  if (reduction == "none") return Reduction::kNone;
  if (reduction == "mean") return Reduction::kMean;
  if (reduction == "sum") return Reduction::kSum;
  LIGER_FAIL("argument 'reduction': expected 'none', 'mean' or 'sum', got '", reduction, "'");
}

// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace cross_entropy_core_impl {
std::atomic<bool> g_check_targets{false};
}  // namespace cross_entropy_core_impl

bool check_targets_enabled() {
  return cross_entropy_core_impl::g_check_targets.load(std::memory_order_relaxed);
}

bool set_check_targets(bool enabled) { return cross_entropy_core_impl::g_check_targets.exchange(enabled); }

[[noreturn]] void fail_bad_target(int64_t V, int64_t ignore_index, int64_t value, int64_t position) {
  std::string msg = "liger_cpp: argument 'target': expected values in [0, " + std::to_string(V) +
                    ") or ignore_index (" + std::to_string(ignore_index) + "), got " + std::to_string(value) +
                    " at position " + std::to_string(position);
  throw c10::ValueError(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                        std::move(msg));
}

void check_ce_target_values(const at::Tensor& target, int64_t V, int64_t ignore_index) {
  if (target.numel() == 0) return;
  if (!target.is_cuda()) {
    const at::Tensor t = target.contiguous().to(at::kLong);
    const int64_t* y = t.const_data_ptr<int64_t>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i)
      if (y[i] != ignore_index && (y[i] < 0 || y[i] >= V)) fail_bad_target(V, ignore_index, y[i], i);
    return;
  }
  if (!check_targets_enabled()) {
#ifdef LIGER_CPP_WITH_CUDA
    // The prologue kernel's device-side assertion (its scales unused): one launch of ours, where
    // the same check from ATen ops took seven, each a kernel a process's first call had to load.
    ce_prologue_cuda(target.reshape({-1}).to(at::kLong).contiguous(), at::Tensor(), V, ignore_index,
                     Reduction::kSum);
#endif
    return;
  }
  const at::Tensor bad = ((target < 0) | (target >= V)) & (target != ignore_index);
  // The opt-in check (liger_cpp.set_check_targets): synchronises with the host, raises ValueError.
  if (!bad.any().item<bool>()) return;
  const int64_t i = bad.reshape({-1}).nonzero()[0][0].item<int64_t>();
  fail_bad_target(V, ignore_index, target.reshape({-1})[i].item<int64_t>(), i);
}

}  // namespace liger_cpp

// ---- liger::_ce_rows: the row step as an op, for tests and benchmarks of the kernels themselves ----
#include <torch/library.h>

namespace liger_cpp {
namespace cross_entropy_core_impl {

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

}  // namespace cross_entropy_core_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace cross_entropy_core_impl;  // NOLINT(build/namespaces)
  m.impl("_ce_rows", &ce_rows_op);
}
#ifdef LIGER_CPP_WITH_CUDA
TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace cross_entropy_core_impl;  // NOLINT(build/namespaces)
  m.impl("_ce_rows", &ce_rows_op);
}
#endif

}  // namespace liger_cpp
