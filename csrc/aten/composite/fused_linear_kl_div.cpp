// KL divergence of a given target distribution, fused with the student's lm_head (Liger's
// LigerFusedLinearKLDivLoss; the formulas are the schema's, csrc/schema.cpp): the (rows x V)
// logits never exist at once. Per chunk of rows:
//   z = (x @ W^T + b) / temperature   (the GEMM's alpha carries 1 / temperature; one rounding)
//   the row step (the distillation rows' KL mode, csrc/kernels/divergence/divergence.h, CPU twin
//   in csrc/aten/cpu/divergence_cpu.cpp): per row sum q (log max(q, eps) - log p) and
//   dz = scale (p sum(q) - q) / temperature written over z, float32 math (float64 on the CPU),
//   ignored rows 0 (never multiplied: a NaN in an ignored row stays out)
//   dX rows = dz @ W, dW (+)= dz^T @ x (float32 accumulation with accum_dtype), dB += column sums
// The normaliser n (rows counted) stays a device tensor: no host synchronisation on CUDA.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <string_view>
#include <tuple>

#include "aten/checks/common.h"
#include "aten/checks/divergence_core.h"
#include "aten/checks/linear_chunks.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace fused_linear_kl_div_impl {

using KlResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

KlResult kl_fwd(const at::Tensor& student_input, const at::Tensor& student_weight, const at::Tensor& target,
                const std::optional<at::Tensor>& shift_labels, const std::optional<at::Tensor>& student_bias,
                c10::string_view reduction, int64_t ignore_index, double temperature, double eps,
                std::optional<at::ScalarType> accum_dtype, int64_t chunk_rows, bool compute_dx,
                bool compute_dw, bool compute_db) {
  const c10::DeviceGuard device_guard(student_input.device());
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const std::string_view red(reduction.data(), reduction.size());
  LIGER_CHECK_ARG(red == "batchmean" || red == "mean" || red == "sum", "reduction",
                  "expected 'batchmean', 'mean' or 'sum' (the gradients are computed in the forward, so "
                  "a per-element loss is not offered: LigerKLDIVLoss on logits has it), got '",
                  red, "'");
  LIGER_CHECK_ARG(std::isfinite(temperature) && temperature != 0.0, "temperature",
                  "expected a finite non-zero value, got ", temperature);
  LIGER_CHECK_ARG(std::isfinite(eps) && eps >= 0.0, "eps", "expected a finite value >= 0, got ", eps);
  LIGER_CHECK_ARG(chunk_rows >= 0, "chunk_rows", "expected a non-negative row count (0: automatic), got ",
                  chunk_rows);
  heads::check_head(student_input, student_weight, student_bias, "student_input", "student_weight",
                    "student_bias");
  const int64_t H = student_input.size(-1), M = student_input.numel() / H, V = student_weight.size(0);
  LIGER_CHECK_ARG(target.dim() >= 1 && target.size(-1) == V && target.numel() == M * V, "target", "expected ",
                  M, " rows of ", V,
                  " probabilities (student_input's rows, student_weight's V), "
                  "got shape ",
                  shape_str(target));
  LIGER_CHECK_ARG(target.device() == student_input.device(), "target", "expected device ",
                  student_input.device(), ", got ", target.device());
  LIGER_CHECK_ARG(is_float_type(target.scalar_type(), !student_input.is_cuda()), "target",
                  "expected a float dtype, got ", dtype_str(target.scalar_type()));
  const bool dbl = student_input.scalar_type() == at::kDouble;
  bool accum_fp32 = false;
  if (accum_dtype.has_value()) {
    const at::ScalarType a = *accum_dtype;
    LIGER_CHECK_ARG(a == at::kFloat || (a == at::kDouble && dbl), "accum_dtype",
                    "expected None or torch.float32, got ", dtype_str(a));
    const at::ScalarType in = student_input.scalar_type();
    accum_fp32 = a == at::kFloat && (in == at::kHalf || in == at::kBFloat16);
  }
  at::Tensor labels;
  if (shift_labels.has_value() && shift_labels->defined()) {
    LIGER_CHECK_ARG(shift_labels->numel() == M, "shift_labels", "expected ", M,
                    " elements (one per row), got shape ", shape_str(*shift_labels));
    check_index_dtype(*shift_labels, "shift_labels", "labels");
    LIGER_CHECK_ARG(shift_labels->device() == student_input.device(), "shift_labels", "expected device ",
                    student_input.device(), ", got ", shift_labels->device());
    labels = shift_labels->reshape({M});
  }
  const at::ScalarType acc = dbl ? at::kDouble : at::kFloat;
  const auto acc_opts = student_input.options().dtype(acc);
  const at::Tensor labels_long = labels.defined() ? labels.to(at::kLong).contiguous() : at::Tensor();
  const at::Tensor keep = labels.defined() ? (labels != ignore_index) : at::Tensor();
  // rows counted, and the reduction's scale: a device scalar (0 rows: 1, over a zero sum)
  const at::Tensor n = keep.defined() ? keep.sum().to(acc).clamp_min(1.0)
                                      : at::full({}, static_cast<double>(std::max<int64_t>(M, 1)), acc_opts);
  at::Tensor scale = red == "sum" ? at::ones({}, acc_opts) : n.reciprocal();
  if (red == "mean") scale = scale / static_cast<double>(V);

  const at::Tensor x = as_rows(student_input);
  const at::Tensor q = target.reshape({M, V});
  const at::Tensor w = heads::gemm_ready(student_weight), b = heads::opt(student_bias);
  heads::Grads gr =
      heads::alloc_grads(x, student_weight, b, compute_dx, compute_dw && !accum_fp32, compute_db);
  at::Tensor dw32;               // the float32 dW accumulator (accum_dtype), or undefined
  if (compute_dw && accum_fp32)  // no rows: no chunk writes it
    dw32 = M > 0 ? at::empty(student_weight.sizes(), acc_opts) : at::zeros(student_weight.sizes(), acc_opts);
  const bool want_grad = gr.any() || dw32.defined();
  at::Tensor rows_loss = at::zeros({M}, acc_opts);
  if (M > 0) {
    int64_t R = heads::chunk_rows(M, V, H, student_input.element_size(), chunk_rows, heads::kDistillMinRows);
    if (chunk_rows == 0) R = heads::even_chunk(M, R);
    at::Tensor buf = at::empty({R, V}, student_input.options());
    // The row step (loss 2 of the distillation rows): the loss terms and dz = scale (p sum(q) - q) / T
    // in one kernel that reads each row of logits and q once (sm_90) or twice, and writes dz over
    // the logits. q keeps its dtype where the kernel takes it (the logits' or float32), else float32.
    DistillRows d;
    d.student_cols = V;
    d.ignore_index = ignore_index;
    d.inv_temperature = 1.0;  // the GEMM's alpha carried 1 / temperature
    d.eps = eps;
    d.loss = 2;
    at::Tensor q_rows = q;
    const at::ScalarType qt = q.scalar_type();
    if (qt != student_input.scalar_type() && qt != at::kFloat &&
        (student_input.is_cuda() || qt != at::kDouble))
      q_rows = q.to(at::kFloat);
    if (q_rows.stride(1) != 1) q_rows = q_rows.contiguous();
    at::Tensor hard_rows = at::empty({R}, acc_opts);
    if (want_grad)
      d.scales = at::stack({scale / temperature, at::zeros({}, acc_opts)}).to(dbl ? acc : at::kFloat);
    for (int64_t r0 = 0; r0 < M; r0 += R) {
      const int64_t rows = std::min(R, M - r0);
      const at::Tensor xc = x.narrow(0, r0, rows);
      at::Tensor zc = buf.narrow(0, 0, rows);
      heads::logits_gemm(zc, xc, w, b, 1.0 / temperature);
      d.s = zc;
      d.t = q_rows.narrow(0, r0, rows);
      d.target = labels_long.defined() ? labels_long.narrow(0, r0, rows) : at::Tensor();
      d.soft = rows_loss.narrow(0, r0, rows);
      d.hard = hard_rows.narrow(0, 0, rows);
      distill_rows(d);
      if (!want_grad) continue;
      heads::chunk_grads(zc, xc, w, gr, r0);
      if (dw32.defined()) heads::accumulate_dw_fp32(dw32, zc.t(), xc, r0 == 0);
    }
  }
  const at::Tensor loss = rows_loss.sum() * scale;  // float32 (float64 for float64 inputs)
  auto [dX, dW, dB] = heads::finish_grads(gr, student_input, b);
  if (dw32.defined()) dW = dw32.to(student_weight.scalar_type());
  return {loss, dX, dW, dB};
}

}  // namespace fused_linear_kl_div_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace fused_linear_kl_div_impl;  // NOLINT(build/namespaces)
  m.impl("fused_linear_kl_div_fwd", &kl_fwd);
}

#ifdef LIGER_CPP_WITH_CUDA
TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace fused_linear_kl_div_impl;  // NOLINT(build/namespaces)
  m.impl("fused_linear_kl_div_fwd", &kl_fwd);
}
#endif

}  // namespace liger_cpp
