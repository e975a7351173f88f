// ATen-side entry points of the row kernels of the RL and distillation losses (math:
// csrc/kernels/divergence/divergence.h): the distillation row step, the log-prob / entropy rows
// and the element-wise divergences. Each runs on its tensors' device (CPU twin in
// csrc/aten/cpu/divergence_cpu.cpp, CUDA wrapper in csrc/aten/cuda/divergence_cuda.cpp); callers
// validate shapes, dtypes and devices. Asynchronous on CUDA.
#pragma once

#include <ATen/ATen.h>

#include "kernels/divergence/grpo_token_math.h"

namespace liger_cpp {

struct DistillRows {
  at::Tensor s;       // [rows, cols] raw student logits, unit column stride; the gradient is written here
  at::Tensor t;       // [rows, cols] raw teacher logits, s's dtype; loss 2: the target probabilities q,
                      // s's dtype or float32 (float64 on the CPU)
  at::Tensor target;  // [rows] int64, or undefined (loss 2: the rows' labels, for ignore_index)
  at::Tensor soft;    // [rows] float32 out (float64 for float64 logits)
  at::Tensor hard;    // [rows] soft's dtype, out
  at::Tensor scales;  // [2] float32 (soft, hard gradient scales; float64 on the CPU for float64
                      // logits), or undefined: no gradient
  int64_t student_cols = 0;
  int64_t ignore_index = -100;
  double inv_temperature = 1.0, beta = 0.5;
  double eps = 1e-10;  // loss 2: the floor of q inside its log
  int loss = 0;        // 0 JSD, 1 cosine, 2 KL of given probabilities (no hard loss)
  bool mask_soft = true;
  bool with_hard = true;  // false: no hard loss (hard 0, and no hard term in the gradient)
};
void distill_rows(const DistillRows& a);
void distill_rows_cpu(const DistillRows& a);

struct LogprobRows {
  at::Tensor z;            // [rows, cols] logits (times z_scale: the tempered logits), unit column stride
  at::Tensor dz;           // backward: [rows, cols] z's dtype, unit column stride, or undefined (over z)
  at::Tensor target;       // [rows] int64
  at::Tensor logp;         // [rows] float32 (forward out)
  at::Tensor entropy;      // [rows] float32 (forward out; backward in)
  at::Tensor stats;        // [rows, 2] float32 (forward out; backward in)
  at::Tensor g_lp, g_ent;  // [rows] float32 or undefined (backward)
  double scale = 1.0;      // backward: the gradient's factor (1 / temperature)
  double z_scale = 1.0;    // z is the stored row times z_scale (1 / temperature), scaled as read
  int64_t ignore_index = -100;
};
void logprob_rows_fwd(const LogprobRows& a);
void logprob_rows_bwd(const LogprobRows& a);
void logprob_rows_fwd_cpu(const LogprobRows& a);
void logprob_rows_bwd_cpu(const LogprobRows& a);

// Cross entropy and total variation distance of student rows against teacher rows (math:
// csrc/kernels/divergence/divergence.h, CeTvdArgs). ce, tvd [rows] and stats [rows, 3]: float32
// (float64 for float64 logits, CPU only).
struct CeTvdRows {
  at::Tensor s, t;               // [rows, cols], one dtype, unit column stride
  at::Tensor target;             // [rows] int64
  at::Tensor ce, tvd, stats;     // forward outputs (stats: backward input)
  at::Tensor grad_ce, grad_tvd;  // backward: [rows], stats' dtype, or undefined
  at::Tensor grad;               // backward out: [rows, cols] s's dtype, unit column stride
  int64_t ignore_index = -100;
};
void ce_tvd_rows_fwd(const CeTvdRows& a);
void ce_tvd_rows_bwd(const CeTvdRows& a);
void ce_tvd_rows_fwd_cpu(const CeTvdRows& a);
void ce_tvd_rows_bwd_cpu(const CeTvdRows& a);

enum class DivKind : int { kJsd = 0, kKl = 1, kTvd = 2 };

struct PointwiseDiv {
  at::Tensor x, y;        // [rows, cols], one dtype, unit column stride
  at::Tensor labels;      // [rows] int64 or undefined
  at::Tensor loss_rows;   // [rows] float32 or undefined
  at::Tensor loss_elems;  // [rows, cols] float32 contiguous, or undefined
  at::Tensor grad;        // [rows, cols] x's dtype, or undefined
  at::Tensor grad_scale;  // [1] float32 (with grad)
  DivKind kind = DivKind::kJsd;
  double beta = 0.5, eps = 1e-10;
  bool log_target = false;
  int64_t ignore_index = -100;
};
void pointwise_div(const PointwiseDiv& a);
void pointwise_div_cpu(const PointwiseDiv& a);

// GRPO's per-token math of one group, and the batch's final sums (grpo_token_math.h). `a` points
// into tensors on `device`; partial is [rows, 3] float32 contiguous, loss / kl / clip () float32.
// grpo_prologue: the mask sums of mask [B, T] float32 contiguous into stats [B + 2] (nseq, n_all,
// the normaliser: given (a float32 scalar) or max(n_all, 1)).
void grpo_prologue(const at::Tensor& mask, const at::Tensor& given, const at::Tensor& stats);
void grpo_token_math(const kernels::GrpoTokenArgs& a, const at::Device& device);
void grpo_finish(const at::Tensor& partial, const at::Tensor& n_all, const at::Tensor& loss,
                 const at::Tensor& kl, const at::Tensor& clip);
void grpo_prologue_cpu(const at::Tensor& mask, const at::Tensor& given, const at::Tensor& stats);
void grpo_token_math_cpu(const kernels::GrpoTokenArgs& a);
void grpo_finish_cpu(const at::Tensor& partial, const at::Tensor& n_all, const at::Tensor& loss,
                     const at::Tensor& kl, const at::Tensor& clip);

#ifdef LIGER_CPP_WITH_CUDA
void grpo_prologue_cuda(const at::Tensor& mask, const at::Tensor& given, const at::Tensor& stats);
void grpo_token_math_cuda(const kernels::GrpoTokenArgs& a, const at::Device& device);
void grpo_finish_cuda(const at::Tensor& partial, const at::Tensor& n_all, const at::Tensor& loss,
                      const at::Tensor& kl, const at::Tensor& clip);
void distill_rows_cuda(const DistillRows& a);
void logprob_rows_fwd_cuda(const LogprobRows& a);
void logprob_rows_bwd_cuda(const LogprobRows& a);
void ce_tvd_rows_fwd_cuda(const CeTvdRows& a);
void ce_tvd_rows_bwd_cuda(const CeTvdRows& a);
void pointwise_div_cuda(const PointwiseDiv& a);
#endif

}  // namespace liger_cpp
