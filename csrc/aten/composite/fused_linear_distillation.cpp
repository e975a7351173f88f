// Distillation losses fused with the student's and the teacher's lm_heads (Liger's
// LigerFusedLinearJSDLoss, LigerFusedLinearCosineSimilarityLoss, LigerFusedLinearJSD; the formulas
// are the schema's, csrc/schema.cpp): neither head's (rows x V) logits exist at once. Per chunk of
// rows:
//   s = student rows @ Ws^T + bs   (into the student buffer; with a smaller student vocabulary its
//                                   columns Vs.. stay the zero padding Liger concatenates)
//   t = teacher rows @ Wt^T + bt   (no gradient)
//   the distillation row step (csrc/kernels/divergence/divergence.h, CPU twin in
//   csrc/aten/cpu/divergence_cpu.cpp): per-row soft and hard losses, and the gradient of
//   w_soft * soft / n + w_hard * hard / n written over s
//   dX rows = ds @ Ws, dWs (+)= ds^T @ x, dbs += column sums
// n (the rows that count) stays a device tensor: no host synchronisation on CUDA.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <string>
#include <tuple>

#include "aten/checks/common.h"
#include "aten/checks/cross_entropy_core.h"
#include "aten/checks/divergence_core.h"
#include "aten/checks/linear_chunks.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace fused_linear_distillation_impl {

using DistillResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

DistillResult distill_fwd(const at::Tensor& student_input, const at::Tensor& student_weight,
                          const at::Tensor& teacher_input, const at::Tensor& teacher_weight,
                          const std::optional<at::Tensor>& target,
                          const std::optional<at::Tensor>& student_bias,
                          const std::optional<at::Tensor>& teacher_bias, c10::string_view loss,
                          double weight_hard_loss, double weight_soft_loss, double beta, int64_t ignore_index,
                          double temperature, bool mask_soft, int64_t chunk_rows, bool compute_dx,
                          bool compute_dw, bool compute_db, bool compute_hard) {
  const c10::DeviceGuard device_guard(student_input.device());
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const std::string_view kind(loss.data(), loss.size());
  LIGER_CHECK_ARG(kind == "jsd" || kind == "cosine", "loss", "expected 'jsd' or 'cosine', got '", kind, "'");
  LIGER_CHECK_ARG(std::isfinite(beta) && beta >= 0.0 && beta <= 1.0, "beta",
                  "expected a value in [0, 1], got ", beta);
  LIGER_CHECK_ARG(std::isfinite(temperature) && temperature > 0.0, "temperature",
                  "expected a positive value, got ", temperature);
  LIGER_CHECK_ARG(std::isfinite(weight_hard_loss) && std::isfinite(weight_soft_loss), "weight_hard_loss",
                  "expected finite loss weights, got ", weight_hard_loss, " and ", weight_soft_loss);
  LIGER_CHECK_ARG(chunk_rows >= 0, "chunk_rows", "expected a non-negative row count (0: automatic), got ",
                  chunk_rows);
  heads::check_head(student_input, student_weight, student_bias, "student_input", "student_weight",
                    "student_bias");
  LIGER_CHECK_ARG(teacher_input.device() == student_input.device() &&
                      teacher_input.scalar_type() == student_input.scalar_type(),
                  "teacher_input", "expected student_input's device and dtype (",
                  dtype_str(student_input.scalar_type()), "), got ", teacher_input.device(), " ",
                  dtype_str(teacher_input.scalar_type()));
  heads::check_head(teacher_input, teacher_weight, teacher_bias, "teacher_input", "teacher_weight",
                    "teacher_bias");
  const int64_t Hs = student_input.size(-1), Ht = teacher_input.size(-1);
  const int64_t M = student_input.numel() / Hs;
  const int64_t Vs = student_weight.size(0), Vt = teacher_weight.size(0);
  LIGER_CHECK_ARG(teacher_input.numel() / Ht == M, "teacher_input", "expected ", M,
                  " rows (student_input's), got shape ", shape_str(teacher_input));
  LIGER_CHECK_ARG(Vt >= Vs, "teacher_weight", "expected at least the student's ", Vs,
                  " classes (a larger teacher vocabulary is the padded one), got shape ",
                  shape_str(teacher_weight));
  at::Tensor tgt;
  if (target.has_value() && target->defined()) {
    LIGER_CHECK_ARG(target->numel() == M, "true_labels", "expected ", M,
                    " elements (one per row), got shape ", shape_str(*target));
    check_index_dtype(*target, "true_labels", "class indices");
    LIGER_CHECK_ARG(target->device() == student_input.device(), "true_labels", "expected device ",
                    student_input.device(), ", got ", target->device());
    tgt = target->reshape({M}).to(at::kLong).contiguous();
    check_ce_target_values(tgt, Vs, ignore_index);
  }
  const auto f32 = student_input.options().dtype(at::kFloat);
  const at::Tensor n = tgt.defined() ? (tgt != ignore_index).sum().to(at::kFloat).clamp_min(1.0)
                                     : at::full({}, static_cast<double>(std::max<int64_t>(M, 1)), f32);

  const at::Tensor x = as_rows(student_input), xt = as_rows(teacher_input);
  const at::Tensor ws = heads::gemm_ready(student_weight), wt = heads::gemm_ready(teacher_weight);
  const at::Tensor bs = heads::opt(student_bias), bt = heads::opt(teacher_bias);
  heads::Grads gr = heads::alloc_grads(x, student_weight, bs, compute_dx, compute_dw, compute_db);
  const bool want_grad = gr.any();
  at::Tensor soft_rows = at::zeros({M}, f32), hard_rows = at::zeros({M}, f32);
  if (M > 0) {
    int64_t R = heads::chunk_rows(M, Vt, std::max(Hs, Ht), student_input.element_size(), chunk_rows,
                                  heads::kDistillMinRows);
    if (chunk_rows == 0) R = heads::even_chunk(M, R);  // no sliver of a last chunk
    at::Tensor sbuf = at::empty({R, Vt}, student_input.options());
    if (Vt > Vs) sbuf.narrow(1, Vs, Vt - Vs).zero_();  // the padding; the row step keeps it zero
    at::Tensor tbuf = at::empty({R, Vt}, student_input.options());
    DistillRows d;
    d.student_cols = Vs;
    d.ignore_index = ignore_index;
    d.inv_temperature = 1.0 / temperature;
    d.beta = beta;
    d.loss = kind == "cosine" ? 1 : 0;
    d.mask_soft = mask_soft;
    d.with_hard = compute_hard || weight_hard_loss != 0.0;
    if (want_grad)
      d.scales = at::stack({weight_soft_loss / n, weight_hard_loss / n}).to(at::kFloat).contiguous();
    for (int64_t r0 = 0; r0 < M; r0 += R) {
      const int64_t rows = std::min(R, M - r0);
      at::Tensor ls = sbuf.narrow(0, 0, rows), lt = tbuf.narrow(0, 0, rows);
      const at::Tensor student_logits = ls.narrow(1, 0, Vs);
      heads::logits_gemm(student_logits, x.narrow(0, r0, rows), ws, bs);
      heads::logits_gemm(lt, xt.narrow(0, r0, rows), wt, bt);
      d.s = ls;
      d.t = lt;
      d.target = tgt.defined() ? tgt.narrow(0, r0, rows) : at::Tensor();
      d.soft = soft_rows.narrow(0, r0, rows);
      d.hard = hard_rows.narrow(0, r0, rows);
      distill_rows(d);
      if (want_grad) heads::chunk_grads(student_logits, x.narrow(0, r0, rows), ws, gr, r0);
    }
  }
  const at::Tensor soft = soft_rows.sum() / n;
  const at::Tensor hard = tgt.defined() ? hard_rows.sum() / n : at::zeros({}, f32);
  const at::Tensor total = weight_hard_loss * hard + weight_soft_loss * soft;
  auto [dX, dW, dB] = heads::finish_grads(gr, student_input, bs);
  return {total, soft, hard, dX, dW, dB};
}

}  // namespace fused_linear_distillation_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace fused_linear_distillation_impl;  // NOLINT(build/namespaces)
  m.impl("fused_linear_distillation_fwd", &distill_fwd);
}

#ifdef LIGER_CPP_WITH_CUDA
TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace fused_linear_distillation_impl;  // NOLINT(build/namespaces)
  m.impl("fused_linear_distillation_fwd", &distill_fwd);
}
#endif

}  // namespace liger_cpp
