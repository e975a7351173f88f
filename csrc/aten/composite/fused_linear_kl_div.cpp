// KL divergence of a given target distribution, fused with the student's lm_head (Liger's
// LigerFusedLinearKLDivLoss; the formulas are the schema's, csrc/schema.cpp): the (rows x V)
// logits never exist at once. Per chunk of rows:
//   z = (x @ W^T + b) / temperature   (the GEMM's alpha carries 1 / temperature; one rounding)
//   log_softmax(z), the rows' KL terms q (log max(q, eps) - log p) and, for the gradient,
//   dz = scale (p sum(q) - q) / temperature: float32 log-probabilities from ATen's log_softmax,
//   the element-wise KL row kernel (csrc/kernels/divergence/divergence.h, kind 1) for the row sums
//   and dL/dlog p, log_softmax's backward for dz (float64 inputs: the same maths in ATen float64)
//   dX rows = dz @ W, dW (+)= dz^T @ x (float32 accumulation with accum_dtype), dB += column sums
// Ignored rows are selected away (never multiplied: a NaN in an ignored row stays out). The
// normaliser n (rows counted) stays a device tensor: no host synchronisation on CUDA.
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
    LIGER_CHECK_ARG(shift_labels->scalar_type() == at::kLong || shift_labels->scalar_type() == at::kInt,
                    "shift_labels", "expected int64 (or int32) labels, got ",
                    dtype_str(shift_labels->scalar_type()));
    LIGER_CHECK_ARG(shift_labels->device() == student_input.device(), "shift_labels", "expected device ",
                    student_input.device(), ", got ", shift_labels->device());
    labels = shift_labels->reshape({M});
  }
  const at::ScalarType acc = dbl ? at::kDouble : at::kFloat;
  const auto acc_opts = student_input.options().dtype(acc);
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
    int64_t R = heads::chunk_rows(M, V, H, student_input.element_size(), chunk_rows);
    if (chunk_rows == 0) R = heads::even_chunk(M, R);
    at::Tensor buf = at::empty({R, V}, student_input.options());
    const at::Tensor grad_scale = scale / temperature;
    // float32 inputs: the row kernel's scale and labels; float64: the ignored rows' value
    const at::Tensor grad_scale32 = dbl ? at::Tensor() : grad_scale.reshape({1}).to(at::kFloat).contiguous();
    const at::Tensor labels_long =
        !dbl && labels.defined() ? labels.to(at::kLong).contiguous() : at::Tensor();
    const at::Tensor zero = dbl && keep.defined() ? at::zeros({}, acc_opts) : at::Tensor();
    for (int64_t r0 = 0; r0 < M; r0 += R) {
      const int64_t rows = std::min(R, M - r0);
      const at::Tensor xc = x.narrow(0, r0, rows);
      at::Tensor zc = buf.narrow(0, 0, rows);
      heads::logits_gemm(zc, xc, w, b, 1.0 / temperature);
      if (!dbl) {
        // float32 statistics in three passes over the chunk: log_softmax (reads the logits once,
        // writes float32 log-probabilities), the element-wise KL rows kernel (row sums of
        // q (log max(q, eps) - lp) and dL/dlp = -q * scale / T, 0 on ignored rows) and
        // log_softmax's backward (dz = g - p sum(g), in the logits' dtype).
        const at::Tensor lp = at::log_softmax(zc, 1, at::kFloat);
        PointwiseDiv pd;
        pd.x = lp;
        pd.y = q.narrow(0, r0, rows).to(at::kFloat).contiguous();
        if (labels_long.defined()) pd.labels = labels_long.narrow(0, r0, rows);
        pd.loss_rows = rows_loss.narrow(0, r0, rows);
        pd.kind = DivKind::kKl;
        pd.eps = eps;
        pd.ignore_index = ignore_index;
        if (want_grad) {
          pd.grad = at::empty_like(lp);
          pd.grad_scale = grad_scale32;
        }
        pointwise_div(pd);
        if (!want_grad) continue;
        // float32 dz, then rounded once to the logits' dtype (ATen's half_to_float backward takes
        // float16 only, and the CPU's none).
        const at::ScalarType in = student_input.scalar_type();
        at::Tensor dl = at::_log_softmax_backward_data(pd.grad, lp, 1, at::kFloat);
        if (in != at::kFloat) dl = dl.to(in);
        // An ignored row's g is 0, but p * 0 is NaN where its logits are not finite: zeroed.
        if (keep.defined()) dl.masked_fill_(keep.narrow(0, r0, rows).logical_not().unsqueeze(1), 0);
        heads::chunk_grads(dl, xc, w, gr, r0);
        if (dw32.defined()) heads::accumulate_dw_fp32(dw32, dl.t(), xc, r0 == 0);
        continue;
      }
      // float64 (the CPU reference dtype): the same maths in float64 ATen operations.
      const at::Tensor lp = at::log_softmax(zc.to(acc), 1);
      const at::Tensor qc = q.narrow(0, r0, rows).to(acc);
      at::Tensor row = (qc * (at::clamp_min(qc, eps).log() - lp)).sum(1);
      const at::Tensor kc = keep.defined() ? keep.narrow(0, r0, rows) : at::Tensor();
      if (kc.defined()) row = at::where(kc, row, zero);
      rows_loss.narrow(0, r0, rows).copy_(row);
      if (!want_grad) continue;
      at::Tensor dz = (lp.exp() * qc.sum(1, true) - qc) * grad_scale;
      if (kc.defined()) dz = at::where(kc.unsqueeze(1), dz, zero);
      const at::Tensor dl = dz.to(student_input.scalar_type());
      heads::chunk_grads(dl, xc, w, gr, r0);
      if (dw32.defined()) heads::accumulate_dw_fp32(dw32, dl.t(), xc, r0 == 0);
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
