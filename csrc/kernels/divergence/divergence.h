// Row kernels of the RL and distillation losses: plain-C++ interface (raw pointers, sizes, a
// stream). The math of each is stated here; csrc/aten/cpu/divergence_cpu.cpp is the CPU twin and
// csrc/aten/checks/divergence_core.h the ATen-side entry points.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/dtype.h"

namespace liger_cpp::kernels {

// Distillation row step. Per row r: student logits s (raw, [cols], the first student_cols real and
// the rest the zero padding of a smaller student vocabulary) and teacher logits t (raw, [cols]);
// zs = s / temperature, zt = t / temperature, S = softmax(zs), P = softmax(zt), y = target[r].
//   hard[r] = lse(s[:student_cols]) - s_y (0 without target or for y == ignore_index)
//   soft[r] (loss 0, JSD): beta 0: sum P (log P - log S); beta 1: sum S (log S - log P); else
//     sum beta P (log P - log M) + (1 - beta) S (log S - log M), M = beta P + (1 - beta) S
//   soft[r] (loss 1, cosine): beta (1 - zs . zt / (max(|zs|, 1e-12) max(|zt|, 1e-12)))
// Rows with y == ignore_index: soft 0 with mask_soft, and no hard loss.
// With scales (device float[2]: cs, ch), the gradient of cs * soft + ch * hard w.r.t. s is
// written over s (its padding columns are written 0, so they stay zero):
//   JSD: beta 0: (S - P) / T; beta 1: S (log S - log P - K) / T with K = soft[r]; else
//     (1 - beta) S (log S - log M - K) / T with K = sum S (log S - log M); cosine:
//     -beta (zt / (|zs| |zt|) - c zs / |zs|^2) / T; hard: softmax(s)_j - [j == y].
//   loss 2, KL of given target probabilities (t holds q, dtype t_dtype; target only selects
//     ignored rows, no hard loss): soft[r] = sum q (log max(q, eps) - log S), gradient
//     cs (S sum(q) - q) / T.
// float32 math, one rounding of the gradient to the logits' dtype.
// On sm_90, for 16-byte aligned rows of at least 2048 elements, a cluster of blocks splits each
// row pair and keeps it in shared memory (read once from global memory); elsewhere a block per
// row reads the pair two or three times.
struct DistillRowsArgs {
  void* s;  // [rows, cols], unit column stride; the gradient is written here
  int64_t s_row_stride;
  const void* t;  // [rows, cols], unit column stride, dtype t_dtype (s's dtype unless loss 2)
  int64_t t_row_stride;
  const int64_t* target;  // [rows] or null
  float* soft;            // [rows]
  float* hard;            // [rows]
  const float* scales;    // device [2] or null (no gradient)
  int64_t rows, cols, student_cols;
  int64_t ignore_index;
  float inv_temperature, beta;
  float eps;  // loss 2: the floor of q inside its log
  int loss;   // 0 JSD, 1 cosine, 2 KL of given probabilities
  bool mask_soft;
  bool with_hard;  // false: no hard loss (hard[r] 0, and no hard term in the gradient)
  DType dtype;     // s's
  DType t_dtype;   // t's: dtype, or float32 with loss 2
};
cudaError_t distill_rows(const DistillRowsArgs& a, cudaStream_t stream);

// Log-probabilities and entropy of rows of (tempered) logits z (the forward: the stored row times
// z_scale), y = target[r]:
//   forward: logp[r] = z_y - lse(z), entropy[r] = lse(z) - sum_j p_j z_j, stats[r] = (max z,
//   log sum exp(z - max)); all 0 for y == ignore_index.
//   backward (from the forward's stats and entropy): dz_j = g_lp[r] ([j == y] - p_j)
//   - g_ent[r] p_j (z_j - (lse - entropy)), times `scale`, written to dz (null: over z; 0 for
//   ignored rows), z again the stored row times z_scale.
// p_j = exp((z_j - max) - log sum): exact near the max where p is large.
struct LogprobRowsArgs {
  void* z;  // [rows, cols], unit column stride
  int64_t row_stride;
  const int64_t* target;
  float* logp;         // forward outputs [rows]
  float* entropy;      // [rows] (read by the backward)
  float* stats;        // [rows, 2] (read by the backward)
  const float* g_lp;   // backward: [rows] or null (0)
  const float* g_ent;  // [rows] or null (0)
  float scale;
  float z_scale;  // z is the stored row times z_scale (1 / temperature, > 0), scaled as it is read
  void* dz;       // backward: [rows, cols] of z's dtype, unit column stride, or null (written over z)
  int64_t dz_row_stride;
  int64_t rows, cols, ignore_index;
  DType dtype;
  int sm_count = 0;  // the device's multiprocessors (0: 132): threads a row (row_common.cuh)
};
cudaError_t logprob_rows_fwd(const LogprobRowsArgs& a, cudaStream_t stream);
cudaError_t logprob_rows_bwd(const LogprobRowsArgs& a, cudaStream_t stream);

// Cross entropy and total variation distance of student rows s against teacher rows t (Liger's
// LigerFusedCETVDFunction), unreduced. Per row, y = target[r], p = softmax(s), q = softmax(t):
//   forward: ce[r] = lse(s) - s_y, tvd[r] = 0.5 sum_j |p_j - q_j|, stats[r] = (lse(s), lse(t),
//   sigma = sum_j p_j sign(p_j - q_j)); all 0 for y == ignore_index.
//   backward (from stats): grad_j = grad_ce[r] (p_j - [j == y]) + 0.5 grad_tvd[r] p_j
//   (sign(p_j - q_j) - sigma), sign(0) = 0 (the softmax's Jacobian applied to 0.5 sign(p - q));
//   0 for ignored rows. grad_ce / grad_tvd null: that term is absent.
// float32 math, one rounding of the gradient to the logits' dtype.
struct CeTvdArgs {
  const void* s;  // [rows, cols], unit column stride
  int64_t s_row_stride;
  const void* t;  // [rows, cols], s's dtype, unit column stride
  int64_t t_row_stride;
  const int64_t* target;  // [rows]
  float* ce;              // forward outputs [rows]
  float* tvd;             // [rows]
  float* stats;           // [rows, 3] (forward out, backward in)
  const float* grad_ce;   // backward: [rows] or null
  const float* grad_tvd;  // [rows] or null
  void* grad;             // [rows, cols] of s's dtype, unit column stride
  int64_t grad_row_stride;
  int64_t rows, cols, ignore_index;
  DType dtype;
};
cudaError_t ce_tvd_fwd(const CeTvdArgs& a, cudaStream_t stream);
cudaError_t ce_tvd_bwd(const CeTvdArgs& a, cudaStream_t stream);

// Element-wise divergences of given rows x (input) and y (target), per element:
//   kind 0, JSD of log-probabilities (Q = e^x, P = e^y): beta 0: P (y - x), d = -P; beta 1:
//     Q (x - y), d = Q (x - y) + Q; else beta P y + (1 - beta) Q x - M log M with M = beta P +
//     (1 - beta) Q, d = (1 - beta) Q (x - log M) (terms with P or Q = 0 are 0)
//   kind 1, KL: log_target: e^y (y - x), d = -e^y; else y (log max(y, eps) - x), d = -y
//   kind 2, TVD: 0.5 |x - y|, d = 0.5 sign(x - y)
// Rows whose label is ignore_index: loss and gradient 0. Outputs: the row sums loss_rows[r], or
// each element in loss_elems ([rows, cols] float32, reduction none); grad = d * grad_scale[0]
// (device scalar) in x's dtype.
struct PointwiseDivArgs {
  const void* x;
  int64_t x_row_stride;
  const void* y;
  int64_t y_row_stride;
  const int64_t* labels;  // [rows] or null
  float* loss_rows;       // [rows] or null
  float* loss_elems;      // [rows, cols] contiguous, or null
  void* grad;             // [rows, cols] or null
  int64_t grad_row_stride;
  const float* grad_scale;
  int kind;
  float beta, eps;
  bool log_target;
  int64_t rows, cols, ignore_index;
  DType dtype;
  int sm_count = 0;  // the device's multiprocessors (0: 132): threads a row (row_common.cuh)
};
cudaError_t pointwise_div_rows(const PointwiseDivArgs& a, cudaStream_t stream);

}  // namespace liger_cpp::kernels
